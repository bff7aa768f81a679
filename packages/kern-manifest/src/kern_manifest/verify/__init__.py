"""The collecting verifier: every rule of manifest-v2.md, every problem reported at once.

Passes run in the order of DESIGN.md §3; each one reports into a shared sink and never
raises on bad input, so one mistake cannot hide another.
"""

from __future__ import annotations

from ..diagnostics import Diagnostic
from ..schema import Manifest
from .buffers import check_buffers
from .context import Context
from .dataflow import check_dataflow
from .dispatches import check_dispatches
from .header import check_header
from .impls import check_impls
from .steps import EXTERNS, check_steps
from .usage import check_usage

PASSES = (check_header, check_buffers, check_steps, check_impls, check_dispatches,
          check_dataflow, check_usage)


def verify(manifest: Manifest) -> list[Diagnostic]:
    """Every rule violation in ``manifest``; an empty list means it verified clean."""
    cx = Context(manifest)
    for run in PASSES:
        run(cx)
    return cx.sink.items


__all__ = ["EXTERNS", "verify"]
