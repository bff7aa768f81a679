"""The collecting verifier: every rule of manifest-v2.md, every problem reported at once.

Passes run in the order of DESIGN.md §3; each one reports into a shared sink and never
raises on bad input, so one mistake cannot hide another.
"""

from __future__ import annotations

from .. import paths
from ..decode import check_param_types
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


def _param_type_errors(manifest: Manifest) -> list[Diagnostic]:
    """E0007 for manifests built in code rather than decoded (decode already checks these)."""
    out: list[Diagnostic] = []
    for name, kernel in manifest.kernels.items():
        check_param_types(kernel, paths.key("kernels", name), out)
    return out


def verify(manifest: Manifest) -> list[Diagnostic]:
    """Every rule violation in ``manifest``; an empty list means it verified clean."""
    bad = _param_type_errors(manifest)
    if bad:
        return bad  # every later pass reads parameter types
    cx = Context(manifest)
    for run in PASSES:
        run(cx)
    return cx.sink.items


__all__ = ["EXTERNS", "verify"]
