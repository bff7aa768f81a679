"""Whether a literal value fits its scalar type (shared by step and dispatch checks)."""

from __future__ import annotations

import math

from ..dtypes import F32_MAX, INT_RANGES


def literal_problem(kind: str, value: int | float) -> str | None:
    """Why ``value`` does not fit scalar type ``kind``, or None when it fits."""
    if kind == "f32":
        if not math.isfinite(value) or abs(value) > F32_MAX:
            return f"f32 literal {value} is not a finite float32"
        return None
    lo, hi = INT_RANGES[kind]
    if not lo <= value <= hi:
        return f"{kind} literal {value} is outside [{lo}, {hi}]"
    return None
