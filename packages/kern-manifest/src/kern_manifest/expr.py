"""The closed expression set: constant, ``{"sym"}``, ``{"ceil_div": [e, c]}``, ``{"mul": [e, c]}``.

Evaluation is checked unsigned 64-bit arithmetic. Every form is monotone non-decreasing in
every symbol, so the values at the all-minimum and all-maximum corners bound the value at
any allowed symbol assignment.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from msgspec import UNSET

from .schema import Expr, ExprNode, Symbol

U64_MAX = 2**64 - 1


class ExprError(ValueError):
    """An expression that cannot be evaluated: unknown symbol, overflow, division by zero."""


def eval_expr(expr: Expr, values: Mapping[str, int]) -> int:
    """Value of ``expr`` with symbols bound by ``values``."""
    if isinstance(expr, int):
        if not 0 <= expr <= U64_MAX:
            raise ExprError(f"constant {expr} is outside unsigned 64-bit range")
        return expr
    if expr.sym is not UNSET:
        try:
            v = values[expr.sym]  # type: ignore[index]
        except KeyError:
            raise ExprError(f"unknown symbol `{expr.sym}`") from None
        if not 0 <= v <= U64_MAX:
            raise ExprError(f"symbol `{expr.sym}` = {v} is outside unsigned 64-bit range")
        return v
    if expr.ceil_div is not UNSET:
        inner, c = expr.ceil_div  # type: ignore[misc]
        x = eval_expr(inner, values)
        if c == 0:
            raise ExprError("division by zero in `ceil_div`")
        if c > U64_MAX or x + c - 1 > U64_MAX:
            raise ExprError(f"overflow in `ceil_div({x}, {c})`")
        return (x + c - 1) // c
    inner, c = expr.mul  # type: ignore[misc]
    x = eval_expr(inner, values)
    if c > U64_MAX or x * c > U64_MAX:
        raise ExprError(f"overflow in `mul({x}, {c})` (above 2^64-1)")
    return x * c


def expr_symbols(expr: Expr) -> Iterator[str]:
    """Every symbol name ``expr`` refers to."""
    while isinstance(expr, ExprNode):
        if expr.sym is not UNSET:
            yield expr.sym  # type: ignore[misc]
            return
        expr = (expr.ceil_div if expr.ceil_div is not UNSET else expr.mul)[0]  # type: ignore[index]


def format_expr(expr: Expr) -> str:
    """Compact human form: ``ceil_div(tokens, 4)``."""
    if isinstance(expr, int):
        return str(expr)
    if expr.sym is not UNSET:
        return str(expr.sym)
    op = "ceil_div" if expr.ceil_div is not UNSET else "mul"
    inner, c = getattr(expr, op)
    return f"{op}({format_expr(inner)}, {c})"


def corners(symbols: Mapping[str, Symbol]) -> tuple[dict[str, int], dict[str, int]]:
    """The all-minimum and all-maximum symbol assignments."""
    return ({n: s.min for n, s in symbols.items()}, {n: s.max for n, s in symbols.items()})
