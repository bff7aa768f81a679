"""mine() on synthetic captures whose ground truth is known (kern_mine_synth.Truth)."""

from __future__ import annotations

import pytest

from kern_mine import Options, mine


def _regular_main(m):
    """Passes of the family that holds the model forwards (the one with a token reference)."""
    fams = {g.family for g in m.groups if g.reference.site is not None}
    return [p for p in m.passes if p.family in fams]


def _by_seq(m, truth):
    got = [(p.first_seq, p.last_seq) for p in _regular_main(m)]
    want = [(f.first_seq, f.last_seq) for f in truth.forwards]
    return got, want


def test_requests_forwards_and_tokens_match_truth(synth):
    d, truth = synth()
    m = mine(d)
    assert m.not_executed == truth.capturing == 3
    assert m.dummy == truth.dummy
    assert len(m.requests) == 5
    got, want = _by_seq(m, truth)
    assert got == want
    main = _regular_main(m)
    assert [p.tokens for p in main] == [f.tokens for f in truth.forwards]
    assert [p.request for p in main] == [f.request for f in truth.forwards]
    assert all(p.regular for p in main)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_jittered_boundaries_are_repaired_by_majority(synth, seed):
    # a quarter of the forward boundaries have their host gap one launch late
    d, truth = synth(jitter=0.25, seed=seed)
    m = mine(d)
    got, want = _by_seq(m, truth)
    assert got == want
    g = next(g for g in m.groups if g.reference.site is not None)
    assert all(s.present == len(g.forwards) for s in g.sites)


def test_wrong_reference_candidates_lose(synth):
    d, _ = synth()
    g = next(g for g in mine(d).groups if g.reference.site is not None)
    ref = g.reference
    assert ref.kernel is not None and ref.kernel.startswith("triton_per_fused_final_norm_4@")
    by_name = {c.kernel.split("@")[0]: c for c in ref.candidates}
    chosen = by_name["triton_per_fused_final_norm_4"]
    assert chosen.chosen
    for name in ("triton_red_fused_decoy_5", "triton_poi_embedding_0"):
        loser = by_name[name]
        assert loser.unfittable + loser.underdetermined > chosen.unfittable + chosen.underdetermined


def test_fits_and_constant_that_looks_like_a_fit(synth):
    d, _ = synth()
    g = next(g for g in mine(d).groups if g.reference.site is not None)
    fits = {}
    for s in g.sites:
        for f in s.fits:
            fits.setdefault((s.name, f.what), set()).add((f.verdict, f.text))
    assert fits[("triton_per_fused_rmsnorm_1", "grid.x")] == {("fitted", "tokens")}
    assert fits[("triton_poi_fused_mul_silu_3", "grid.x")] == {("fitted", "ceil_div(mul(tokens, 19), 2)")}
    assert fits[("triton_poi_fused_mul_silu_3", "param[2]")] == {("fitted", "mul(tokens, 9728)")}
    assert fits[("triton_poi_tiny_6", "grid.x")] == {("constant", "1")}
    # the cache position scalar depends on the position, not on tokens
    assert fits[("triton_poi_cache_write_2", "param[2]")] == {("unfittable", "")}
    assert fits[("cudnn_sdpa_fprop", "grid.y")] == {("constant", "32")}


def test_underdetermined_with_tokens_one_and_two(synth):
    d, _ = synth(requests=((1, 2), (2, 2)), autotune=0, decoy=False)
    g = next(g for g in mine(d).groups if g.reference.site is not None)
    assert sorted(set(t for t in g.tokens if t is not None)) == [1, 2]
    norm = next(s for s in g.sites if s.name == "triton_per_fused_rmsnorm_1")
    gx = next(f for f in norm.fits if f.what == "grid.x")
    assert gx.verdict == "underdetermined" and gx.text == "tokens"
    assert gx.samples == [(1, 1), (2, 2)]


def test_pointer_classes(synth):
    d, truth = synth()
    g = next(g for g in mine(d).groups if g.reference.site is not None)
    seen = {"weight": set(), "cache": set(), "act": set()}
    for s in g.sites:
        for p in s.pointers:
            value = p.range_start + p.offset
            if value in truth.weight_ptrs:
                seen["weight"].add(p.klass)
            elif value in truth.cache_ptrs:
                seen["cache"].add(p.klass)
            else:
                seen["act"].add(p.klass)
    assert seen == {"weight": {"stable"}, "cache": {"stable"}, "act": {"changing"}}


def test_replayability(synth):
    d, _ = synth()
    g = next(g for g in mine(d).groups if g.reference.site is not None)
    kinds = {s.name: s.replay for s in g.sites}
    assert kinds["nvjet_sm90_tst_128x64_a"] == "extra"
    assert kinds["cudnn_sdpa_fprop"] == "aggregate"
    assert kinds["triton_per_fused_rmsnorm_1"] == "flat"


def test_split_decode_graph_makes_two_templates(synth):
    d, truth = synth(split_decode=True)
    m = mine(d)
    main = m.groups
    with_ref = [g for g in main if g.reference.site is not None]
    assert len(with_ref) == 1
    prefill = with_ref[0]
    assert [t for t in prefill.tokens] == [f.tokens for f in truth.forwards if f.tokens > 1]
    decode = [g for g in main if g.family == prefill.family and g.index != prefill.index]
    assert len(decode) == 1 and decode[0].reference.site is None
    assert len(decode[0].forwards) == sum(1 for f in truth.forwards if f.tokens == 1)


def test_request_option(synth):
    d, truth = synth()
    m = mine(d, Options(request=2))
    grouped = [p for p in m.passes if p.group is not None]
    assert grouped and all(p.request == 2 for p in grouped)


def test_no_benchmark_recognition_keeps_them(synth):
    d, truth = synth()
    assert mine(d, Options(min_repeats=0)).dummy == 0
