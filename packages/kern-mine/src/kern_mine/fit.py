"""Fitting one integer series against the closed expression set of the manifest.

A *series* is what one call site showed for one quantity (a grid axis, a scalar parameter)
in each forward of a family, paired with that forward's token count: ``(tokens_i, value_i)``.
The closed set is kern-manifest's expression template over one symbol ``tokens``, ordered
by *class* (simplest first); a fit is the lowest class that explains every sample:

    0  constant c
    1  tokens
    2  mul(tokens, m)            ceil_div(tokens, d)
    3  mul(ceil_div(tokens, d), m)
    4  ceil_div(mul(tokens, m), d)        (m, d >= 2, coprime, d <= max tokens seen // 4)

Verdicts (contract):

* ``constant``        every sample has the same value (whatever the token counts were: a value
                       that never moved is reported as the constant it is, never as a
                       ``ceil_div(tokens, c)`` with a ``c`` above every sample — the "constant
                       that looks like a fit").
* ``fitted``          exactly one expression of the lowest fitting class agrees with every
                       sample, and every other member of that class that also agrees gives the
                       same value for all tokens in ``[1, max tokens seen]``; needs at least
                       ``min_distinct`` distinct token counts.
* ``underdetermined`` something fits, but either fewer than ``min_distinct`` distinct token
                       counts were seen (``tokens`` and ``ceil_div(mul(tokens, 3), 4)`` agree on
                       {1, 2}), or several members of the lowest class fit and disagree inside
                       the sampled range (e.g. ``ceil_div(tokens, d)`` for any d in [120, 149]).
                       ``expr`` then holds a best guess (power-of-two divisors preferred, then
                       the simplest ratio) and ``alternatives`` says what else fits.
* ``unfittable``      two samples with equal tokens disagree, or no member of the set fits.

Pure functions, memoised on the (tokens, values) tuples: the reference search fits the same
series under many candidate references and many sites share series.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Literal

import msgspec
from kern_manifest import Expr, ExprNode, format_expr

__all__ = ["Fit", "Verdict", "TOKENS", "fit_series", "expr_complexity"]

Verdict = Literal["constant", "fitted", "underdetermined", "unfittable"]

TOKENS = ExprNode(sym="tokens")

_MAX_DIVISOR_SCAN = 10**12
"""Class 3 enumerates divisors of gcd(values) by trial division; above this it is skipped."""


class Fit(msgspec.Struct, frozen=True, omit_defaults=True):
    """The outcome of fitting one series."""

    verdict: Verdict
    expr: Expr | None = None
    """The constant, the fitted expression, or (underdetermined) the best guess."""
    text: str = ""
    """``format_expr(expr)``, or empty."""
    cls: int = -1
    """Class of ``expr`` (0..4; -1 when there is none)."""
    alternatives: str = ""
    """Underdetermined: what else fits, in words."""
    reason: str = ""
    """Why this verdict (one line)."""
    samples: tuple[tuple[int, int], ...] = ()
    """The distinct (tokens, value) pairs that decided it, sorted by tokens."""


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _mul(e: Expr, m: int) -> Expr:
    return e if m == 1 else ExprNode(mul=(e, m))


def _cdiv(e: Expr, d: int) -> Expr:
    return e if d == 1 else ExprNode(ceil_div=(e, d))


def expr_complexity(expr: Expr | None) -> int:
    """Number of operators (0 for a constant or ``tokens``); used to break ties."""
    n = 0
    while isinstance(expr, ExprNode):
        if expr.sym is not msgspec.UNSET:
            return n
        n += 1
        expr = (expr.ceil_div if expr.ceil_div is not msgspec.UNSET else expr.mul)[0]  # type: ignore[index]
    return n


def _d_interval(pairs: list[tuple[int, int]]) -> tuple[int, int] | None:
    """The divisors d >= 1 with ceil(t / d) == q for every (t, q); None when empty.

    ceil(t/d) == 1  <=>  d >= t;   ceil(t/d) == q >= 2  <=>  t/q <= d < t/(q-1).
    """
    lo, hi = 1, None
    for t, q in pairs:
        if q < 1:
            return None
        if q == 1:
            lo = max(lo, t)
        else:
            lo = max(lo, _ceil_div(t, q))
            h = (t - 1) // (q - 1)
            hi = h if hi is None else min(hi, h)
    if hi is None or lo > hi:
        return None  # hi None: every q == 1, i.e. a constant (handled as class 0)
    return lo, hi


def _best_divisor(lo: int, hi: int) -> int:
    """A representative of [lo, hi]: the smallest power of two in it, else lo.

    Block sizes of GPU kernels are almost always powers of two; this is a prior about
    kernels, not about any model, and it only picks the *guess* of an underdetermined fit."""
    p = 1 << max(0, (lo - 1).bit_length())
    return p if p <= hi else lo


def _divisors(g: int) -> list[int]:
    small, large = [], []
    i = 1
    while i * i <= g:
        if g % i == 0:
            small.append(i)
            if i * i != g:
                large.append(g // i)
        i += 1
    return small + large[::-1]


def _simplest(lo: Fraction, lo_incl: bool, hi: Fraction | None, hi_incl: bool) -> Fraction:
    """The fraction with the smallest denominator (then numerator) in the interval from ``lo``
    to ``hi`` (None = infinity), ends included as flagged; 0 <= lo < hi, interval non-empty.
    Continued-fraction descent of the Stern-Brocot tree."""
    n = math.floor(lo)
    cand = n if (lo_incl and n == lo) else n + 1
    if hi is None or cand < hi or (hi_incl and cand == hi):
        return Fraction(cand)
    # No integer inside: n <= lo < hi <= n + 1.  Write x = n + 1/y and recurse on y.
    y = _simplest(1 / (hi - n), hi_incl, None if lo == n else 1 / (lo - n), lo_incl)
    return n + 1 / y


def _fmt_pairs(pairs: list[tuple[int, int]], limit: int = 6) -> str:
    s = ", ".join(f"{t}->{v}" for t, v in pairs[:limit])
    return s + (", ..." if len(pairs) > limit else "")


def fit_series(tokens: tuple[int, ...], values: tuple[int, ...], min_distinct: int = 3) -> Fit:
    """Fits ``values[i]`` as a function of ``tokens[i]`` (see the module docstring)."""
    return _fit(tuple(tokens), tuple(values), min_distinct)


@lru_cache(maxsize=1 << 16)
def _fit(tokens: tuple[int, ...], values: tuple[int, ...], min_distinct: int) -> Fit:
    if not tokens or len(tokens) != len(values):
        return Fit("unfittable", reason="no samples")
    seen: dict[int, int] = {}
    for t, v in zip(tokens, values):
        old = seen.setdefault(t, v)
        if old != v:
            return Fit("unfittable", reason=f"differs at equal tokens: tokens={t} gave {old} and {v}",
                       samples=((t, old), (t, v)))
    pairs = sorted(seen.items())
    samples = tuple(pairs)
    vals = {v for _, v in pairs}
    if len(vals) == 1:
        (c,) = vals
        if c < 0:
            return Fit("unfittable", reason=f"negative value {c}", samples=samples)
        return Fit("constant", c, str(c), 0, reason=f"{len(pairs)} token count(s), one value", samples=samples)
    if pairs[0][0] < 1 or min(vals) < 1:
        return Fit("unfittable", reason="varies but has a value or token count below 1", samples=samples)

    tmax = pairs[-1][0]
    # Candidates of each class, lowest first: (expr, alternatives text) lists.
    found: list[Expr] = []
    ambiguous = False
    alts = ""
    cls = -1
    if all(v == t for t, v in pairs):
        cls, found = 1, [TOKENS]
    if cls < 0:
        ms = {v // t for t, v in pairs if v % t == 0}
        if len(ms) == 1 and all(v % t == 0 for t, v in pairs):
            cls, found = 2, [_mul(TOKENS, ms.pop())]
        iv = _d_interval(pairs)
        if iv is not None and iv[1] >= 2:
            lo, hi = max(iv[0], 2), iv[1]
            cls = 2
            found.append(_cdiv(TOKENS, _best_divisor(lo, hi)))
            if lo != hi:
                ambiguous = True
                alts = f"ceil_div(tokens, d) for every d in [{lo}, {hi}]"
    if cls < 0:
        g = 0
        for _, v in pairs:
            g = math.gcd(g, v)
        if g <= _MAX_DIVISOR_SCAN:
            fits3: list[tuple[int, int, int]] = []
            for m in _divisors(g):
                if m < 2:
                    continue
                iv = _d_interval([(t, v // m) for t, v in pairs])
                if iv is not None and iv[1] >= 2:
                    fits3.append((m, max(iv[0], 2), iv[1]))
            if fits3:
                cls = 3
                found = [_mul(_cdiv(TOKENS, _best_divisor(lo, hi)), m) for m, lo, hi in fits3]
                ambiguous = len(fits3) > 1 or fits3[0][1] != fits3[0][2]
                if ambiguous:
                    alts = "; ".join(f"mul(ceil_div(tokens, d), {m}) for d in [{lo}, {hi}]" for m, lo, hi in fits3)
    if cls < 0:
        a = max(Fraction(v - 1, t) for t, v in pairs)
        b = min(Fraction(v, t) for t, v in pairs)
        # Any ratio m/d in (a, b] fits; with d free, one always exists when a < b (t + 1 is
        # ceil_div(mul(t, 601), 600) on t <= 600).  Only ratios whose denominator is well
        # inside the sampled range are members: d <= tmax // 4 (Occam; see module doc).
        dmax = tmax // 4
        if a < b:
            r = _simplest(a, False, b, True)
            if r.denominator <= dmax:
                cls = 4
                found = [ExprNode(ceil_div=(_mul(TOKENS, r.numerator), r.denominator))]
                split = _simplest(a, False, b, False).denominator
                if split <= dmax:
                    ambiguous = True
                    alts = (f"ceil_div(mul(tokens, m), d) for m/d in ({a}, {b}] (d <= {dmax}); "
                            f"they disagree at tokens={split}")
    if cls < 0:
        return Fit("unfittable", reason=f"no expression of the closed set fits {_fmt_pairs(pairs)}", samples=samples)

    best = found[0]
    text = format_expr(best)
    if len(pairs) < min_distinct:
        alt = alts or "other members of the set"
        return Fit("underdetermined", best, text, cls, alternatives=alt,
                   reason=f"only {len(pairs)} distinct token count(s) (< {min_distinct}); {alt} also fit",
                   samples=samples)
    if ambiguous or len(found) > 1:
        return Fit("underdetermined", best, text, cls, alternatives=alts,
                   reason=f"several class-{cls} expressions fit and disagree within tokens <= {tmax}",
                   samples=samples)
    return Fit("fitted", best, text, cls, reason=f"unique class-{cls} fit over {len(pairs)} token counts",
               samples=samples)
