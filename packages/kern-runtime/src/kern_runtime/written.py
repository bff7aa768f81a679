"""Refuse to hand out an output no run has written yet.

The arena is zeroed at load, and a program writes only the buffers its dispatches write
(``out`` / ``inout`` interface parameters). A read of an ``output`` buffer that no run
since the load wrote would return those zeros as if they were a result: the trap
of reading ``next_token`` or ``logits`` right after a ``prefill`` whose dispatches write only
the KV cache. :class:`Written` tracks, per runtime, the buffers some run has written, and the
host reads (``read``, ``read_async``), ``copy`` and the copies of a sequence raise a
:class:`~kern_runtime.CallerError` naming the programs that would write the buffer instead.

A buffer written once stays written: a later run that does not rewrite it leaves the last
result there, which the runtime cannot tell from a stale one (the DSpark loops read a draft's
``draft_tokens`` after ``verify`` on purpose). Cost per run: one set union, skipped once the
program's writes are all in (a frozenset subset test).
"""

from __future__ import annotations

from collections.abc import Iterable

from kern_manifest import VerifiedManifest

from .errors import CallerError

#: The buffer class that holds the results a caller reads (workspaces are scratch: a read of
#: one is the caller's own business).
UNWRITTEN_AT_LOAD = ("output",)


def program_writes(vm: VerifiedManifest) -> dict[str, frozenset[str]]:
    """Program -> the buffers its dispatches write (``out`` / ``inout`` buffer arguments)."""
    out: dict[str, frozenset[str]] = {}
    for pname, prog in vm.manifest.programs.items():
        names: set[str] = set()
        for d in prog.dispatches:
            for p, a in zip(vm.params[d.kernel], d.args):
                if p.is_memory and p.writes and isinstance(a.buf, str):
                    names.add(a.buf)
        out[pname] = frozenset(names)
    return out


class Written:
    """The ``output`` buffers some run of this runtime has written."""

    def __init__(self, vm: VerifiedManifest) -> None:
        self.by_program = program_writes(vm)
        self.tracked = frozenset(n for n, b in vm.manifest.buffers.items()
                                 if b.cls in UNWRITTEN_AT_LOAD)
        self.done: set[str] = set()
        self.runs: dict[str, None] = {}   # the programs run so far, in first-run order

    def ran(self, program: str) -> None:
        """``program`` was queued: what it writes counts as written from now on."""
        writes = self.by_program[program]
        if not writes <= self.done:
            self.done |= writes
        if program not in self.runs:
            self.runs[program] = None

    def check(self, names: Iterable[str], where: str) -> None:
        """Raise unless every tracked buffer in ``names`` has been written by some run."""
        for name in names:
            if name in self.tracked and name not in self.done:
                raise self._refusal(name, where)

    def _refusal(self, name: str, where: str) -> CallerError:
        writers = [f"`{p}`" for p, w in self.by_program.items() if name in w]
        ran = ", ".join(f"`{p}`" for p in self.runs) or "none"
        return CallerError(
            f"{where}: no run since the runtime was loaded wrote `{name}`, so it holds no "
            f"result (programs run so far: {ran})",
            help=f"run a program that writes `{name}` first ({', '.join(writers)})"
                 if writers else f"no program of this manifest writes `{name}`")
