"""State shared by the verifier passes of one run."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..diagnostics import Sink
from ..dtypes import ParamType, parse_param_type
from ..expr import ExprError, corners, eval_expr
from ..schema import Expr, Manifest


@dataclass
class Context:
    m: Manifest
    sink: Sink = field(default_factory=Sink)

    def __post_init__(self) -> None:
        self.lo, self.hi = corners(self.m.symbols)
        # Param strings were validated at decode; parsing is cached per distinct string.
        self.iface: dict[str, list[ParamType]] = {
            name: [parse_param_type(p) for p in k.params] for name, k in self.m.kernels.items()
        }

    def eval_corners(self, expr: Expr, path: str, what: str) -> tuple[int, int] | None:
        """``expr`` at the all-min and all-max corners, or None after reporting E0301."""
        try:
            return eval_expr(expr, self.lo), eval_expr(expr, self.hi)
        except ExprError as err:
            self.sink.error("E0301", f"{what}: {err}", path)
            return None


def dispatch_ref(label: object) -> str:
    """`` in dispatch `label` `` when the dispatch has a label (UNSET otherwise)."""
    return f" (dispatch `{label}`)" if isinstance(label, str) else ""
