"""fit_series against the closed set: verdicts, the samples that decided them, and that the
expressions are kern-manifest expressions evaluating to the samples."""

from __future__ import annotations

import msgspec
import pytest
from kern_manifest import Expr, eval_expr

from kern_mine import fit_series

T = (1, 7, 34, 85, 175, 600)


def cdiv(a, b):
    return -(-a // b)


CASES = {
    "tokens": (lambda t: t, "fitted", "tokens"),
    "mul": (lambda t: 2560 * t, "fitted", "mul(tokens, 2560)"),
    "ratio": (lambda t: cdiv(19 * t, 2), "fitted", "ceil_div(mul(tokens, 19), 2)"),
    "composite": (lambda t: 20 * cdiv(t, 3), "fitted", "mul(ceil_div(tokens, 3), 20)"),
    "constant": (lambda t: 4096, "constant", "4096"),
    # grid ceil_div(tokens, 4096) never moved on tokens <= 600: a constant, not a fit.
    "looks_like_fit": (lambda t: cdiv(t, 4096), "constant", "1"),
    # ceil_div(tokens, d) for any d in [120, 149] explains these samples: honest guess.
    "coarse": (lambda t: cdiv(t, 128), "underdetermined", "ceil_div(tokens, 128)"),
    "offset": (lambda t: t + 1, "unfittable", ""),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_verdicts(case):
    fn, verdict, text = CASES[case]
    values = tuple(fn(t) for t in T)
    f = fit_series(T, values)
    assert (f.verdict, f.text) == (verdict, text), f.reason
    assert f.samples == tuple(zip(T, values))
    if f.expr is not None and verdict != "underdetermined":
        for t, v in zip(T, values):
            assert eval_expr(f.expr, {"tokens": t}) == v
        # The expression is a manifest Expr: it round-trips through kern-manifest's schema.
        assert msgspec.json.decode(msgspec.json.encode(f.expr), type=Expr) == f.expr


def test_only_two_token_counts_is_underdetermined():
    f = fit_series((1, 2, 1, 2), (1, 2, 1, 2))
    assert f.verdict == "underdetermined" and f.text == "tokens"
    assert "2 distinct token count" in f.reason
    assert fit_series((1, 2, 3), (1, 2, 3)).verdict == "fitted"


def test_equal_tokens_different_values_is_unfittable():
    f = fit_series((1, 1, 7), (5, 6, 12))
    assert f.verdict == "unfittable" and f.samples == ((1, 5), (1, 6))
    assert "equal tokens" in f.reason


def test_underdetermined_says_what_else_fits():
    f = fit_series(T, tuple(cdiv(t, 128) for t in T))
    assert f.alternatives == "ceil_div(tokens, d) for every d in [120, 149]"
    g = fit_series(T, tuple(6 * cdiv(t, 64) for t in T))
    assert g.verdict == "underdetermined" and g.text == "mul(ceil_div(tokens, 64), 6)"


def test_single_token_count_constant():
    assert fit_series((1, 1, 1), (9, 9, 9)).verdict == "constant"
