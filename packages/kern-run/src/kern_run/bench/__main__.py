"""``python -m kern_run.bench SPEC_JSON``: the child process of :mod:`.torch_side` (the
baseline, the random checkpoint, the ``--profile`` records), started by
:func:`.torch_side.child_cmd`; not a command for people (that is ``kern-run bench``).

A ``__main__`` of the package rather than ``python -m kern_run.bench.torch_side``: the package
imports :mod:`.torch_side`, and running an already imported module as ``__main__`` makes runpy
warn on stderr (and run the module twice)."""

import os
import sys

from .torch_side import main

code = main()
sys.stdout.flush()
sys.stderr.flush()
# The result is out; skip the interpreter's teardown. H200, 2026-11-30: after a
# torch.profiler session the child aborted in teardown ("free(): invalid pointer"; once
# "double free or corruption" when the profile still ran in the bench's process), after
# its result was complete. Cause not found; nothing is left to release at this point.
os._exit(code)
