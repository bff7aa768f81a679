"""The DSpark loop (kern_run.spec.dspark) against plain greedy on the numpy DSpark stand-in
(dspark_fakes): same tokens and stop for every acceptance pattern, chunking, capacity and
step edge; the call sequence of docs/dspark.md "The caller loop"; the stats."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kern_run.errors import KernRunError
from kern_run.generate import generate
from kern_run.spec.check import produced
from kern_run.spec.dspark import DraftSpec, dspark_generate
from dspark_fakes import DSparkRuntime, FakeEvent, Violation
from spec_fakes import KVModelRuntime

VOCAB = 64
MASK = 3


def plain_run(prompt, *, model="copy", capacity=None, **kw):
    cap = capacity or 256
    return generate(KVModelRuntime(model=model, vocab=VOCAB, capacity=cap), prompt,
                    max_tokens=16, capacity=capacity, **kw)


def ds_run(prompt, *, block=7, plan=None, model="copy", capacity=None, rt=None, **kw):
    rt = rt or DSparkRuntime(block=block, mask=MASK, plan=plan, model=model, vocab=VOCAB,
                             capacity=capacity or 256)
    res = dspark_generate(rt, prompt, max_tokens=16, draft=DraftSpec(block, MASK),
                          capacity=capacity, **kw)
    return res, rt


def same(a, b):
    assert (a.tokens, a.stop, a.eos_token) == (b.tokens, b.stop, b.eos_token)


def seq(rt):
    """(program, pos0, tokens) of every run, in order."""
    return [(e[1], e[4], e[2]["tokens"]) for e in rt.runs()]


@st.composite
def cases(draw):
    prompt = draw(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=30))
    if draw(st.booleans()):
        prompt = (prompt[:4] * 10)[:len(prompt)]
    steps = draw(st.integers(1, 40))
    block = draw(st.integers(1, 7))
    return dict(model=draw(st.sampled_from(["copy", "random"])), prompt=prompt, steps=steps,
                block=block, k=draw(st.integers(1, block)), chunk=draw(st.integers(1, 9)),
                eos=draw(st.sets(st.integers(0, VOCAB - 1), max_size=3)),
                slack=draw(st.sampled_from([None, 0, 1, 3, 8])), eager=draw(st.booleans()),
                accept=draw(st.lists(st.integers(0, 7), min_size=1, max_size=8)),
                chain=draw(st.booleans()), pipeline=draw(st.booleans()))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_dspark_output_equals_plain_greedy(c):
    cap = None if c["slack"] is None else len(c["prompt"]) + c["steps"] + c["slack"]
    common = dict(steps=c["steps"], chunk=c["chunk"], eos=c["eos"], eager=c["eager"])
    plain = plain_run(c["prompt"], model=c["model"], capacity=cap, **common)
    acc = c["accept"]
    rt = DSparkRuntime(block=c["block"], mask=MASK, model=c["model"], vocab=VOCAB,
                       capacity=cap or len(c["prompt"]) + c["steps"] + c["block"],
                       plan=lambda r, p: acc[r % len(acc)], accepting=c["pipeline"])
    res, _ = ds_run(c["prompt"], block=c["block"], rt=rt, capacity=cap, k=c["k"],
                    chain=c["chain"], pipeline=c["pipeline"], **common)
    same(res, plain)
    assert not rt.uncaptured
    s = res.spec
    assert len(produced(res)) == 1 + s.round_tokens + s.decode_steps
    assert res.decode_tokens == len(produced(res)) - 1
    for e in rt.runs("draft"):                    # never a draft slot past the capacity
        assert cap is None or e[4] + c["block"] <= cap
    for e in rt.runs("verify"):
        assert e[2]["tokens"] <= c["k"] + 1


@pytest.mark.parametrize("ahead", [False, True])
def test_full_acceptance_call_sequence(ahead):
    prompt = list(range(10, 20))                      # 10 tokens, chunk 4: 4 + 4 + 1
    plain = plain_run(prompt, steps=20, chunk=4)
    res, rt = ds_run(prompt, block=7, steps=20, chunk=4, ahead=ahead)
    same(res, plain)
    # round anchors: 10 (first token), then + 8 per full round; 20 steps = 1 + 8 + 8 + 3.
    # The last round (3 steps left: 2 drafts) needs no precompute; queued ahead of its
    # predictions it still gets one: had it accepted nothing, a round would follow.
    assert seq(rt) == [
        ("prefill", 0, 4), ("draft_precompute", 0, 4),
        ("prefill", 4, 4), ("draft_precompute", 4, 4),
        ("prefill", 8, 1), ("draft_precompute", 8, 1),
        ("decode_spec", 9, 1), ("draft_precompute", 9, 1),
        ("draft", 10, 7), ("verify", 10, 8), ("draft_precompute", 10, 8),
        ("draft", 18, 7), ("verify", 18, 8), ("draft_precompute", 18, 8),
        ("draft", 26, 7), ("verify", 26, 3)] + [("draft_precompute", 26, 3)] * ahead
    s = res.spec
    assert s.rounds == 3 and s.tau == 19 / 3 and s.decode_steps == 0
    assert s.conditional == [1.0] * 7 and s.acceptance == [1.0] * 7
    # graphs: full prefill chunks and their precompute, decode_spec, decode, draft, verify
    # widths 2 … 8, precompute 1 … 8; the tail prefill chunk (1 token) runs eager
    caps = {(e[1], e[2]["tokens"]) for e in rt.events if e[0] == "capture"}
    assert caps == ({("prefill", 4), ("decode_spec", 1), ("decode", 1), ("draft", 7)}
                    | {("verify", w) for w in range(2, 9)}
                    | {("draft_precompute", w) for w in range(1, 9)})
    first_write = next(i for i, e in enumerate(rt.events) if e[0] == "write")
    assert all(i < first_write for i, e in enumerate(rt.events) if e[0] == "capture")
    assert [e[3] for e in rt.runs("prefill")] == [True, True, False]


@pytest.mark.parametrize("plan", [None, lambda r, p: 3, lambda r, p: 0])
def test_chained_rounds_queue_verify_behind_the_draft(plan):
    """chain (the default): the same calls and tokens; between each draft and its verify the host waits for
    nothing, and the drafts reach verify's token_ids rows 1 … m by a device copy."""
    prompt = list(range(10, 20))
    plain = plain_run(prompt, steps=20, chunk=4)
    ref, rt_ref = ds_run(prompt, plan=plan, steps=20, chunk=4, chain=False)
    res, rt = ds_run(prompt, plan=plan, steps=20, chunk=4, ahead=False)   # chain: default
    same(res, plain)
    same(res, ref)
    assert seq(rt) == seq(rt_ref)
    ev = rt.events
    drafts = [i for i, e in enumerate(ev) if e[0] == "run" and e[1] == "draft"]
    for d in drafts:
        v = next(i for i in range(d, len(ev)) if ev[i][0] == "run" and ev[i][1] == "verify")
        between = ev[d + 1:v]
        assert not any(e[0] == "wait" for e in between)
        assert ("copy", "token_ids", "draft_tokens") in between
    assert res.spec.rounds == ref.spec.rounds and res.spec.tau == ref.spec.tau


@pytest.mark.parametrize("plan", [None, lambda r, p: 3, lambda r, p: 0, lambda r, p: r % 4])
def test_precompute_ahead_of_the_predictions(plan):
    """ahead (the default with chain): each round's precompute of all its verified rows is
    queued right behind verify and the reads, before any wait; the draft KV the next draft
    reads is the same (the fake's draft checks every row before its anchor), so the same
    tokens, rounds and acceptance as the loop that precomputes j + 1 rows after the wait."""
    prompt = list(range(10, 20))
    kw = dict(plan=plan, steps=40, chunk=4)
    ref, rt_ref = ds_run(prompt, ahead=False, **kw)
    res, rt = ds_run(prompt, **kw)
    same(res, ref)
    assert res.spec.round_log == ref.spec.round_log and res.spec.ahead
    ev = rt.events
    for v in [i for i, e in enumerate(ev) if e[0] == "run" and e[1] == "verify"]:
        nxt = next((i for i in range(v + 1, len(ev)) if ev[i][0] == "run"), None)
        if nxt is None or ev[nxt][1] != "draft_precompute":
            continue                                  # the run's last round, none follows
        assert (ev[nxt][4], ev[nxt][2]) == (ev[v][4], ev[v][2])   # p, all m + 1 rows
        assert not any(e[0] == "wait" for e in ev[v + 1:nxt])
    rounds = [e for e in rt.runs("verify")]
    pcs = [e for e in rt.runs("draft_precompute")][4:]             # after the prompt's
    assert len(pcs) >= len(rounds) - 1 and len(rounds) >= 4


PLANS = [None, lambda r, p: 3, lambda r, p: 0, lambda r, p: r % 4, lambda r, p: 7 - r % 8]


def pipelined(prompt, plan, **kw):
    rt = DSparkRuntime(block=7, mask=MASK, plan=plan, model="copy", vocab=VOCAB,
                       capacity=kw.get("capacity") or 256, accepting=True)
    return ds_run(prompt, rt=rt, pipeline=True, **kw)


@pytest.mark.parametrize("plan", PLANS)
def test_pipelined_rounds_equal_the_chained(plan):
    """pipeline (docs/dspark.md step 7): the same tokens, rounds and per-round acceptance as
    the chained loop, and the same launches at the same positions, but for the rounds queued
    ahead of the stop; each such round is queued before the previous round's predictions are
    waited for, its inputs copied from the acceptance outputs (no host write between)."""
    prompt = list(range(10, 20))
    kw = dict(steps=60, chunk=4)
    ref, rt_ref = ds_run(prompt, plan=plan, **kw)
    res, rt = pipelined(prompt, plan, **kw)
    same(res, ref)
    s = res.spec
    assert s.round_log == ref.spec.round_log and s.pipelined and s.queued_ahead >= 3
    assert all(c.pos0 >= 0 for c in res.calls)
    want = seq(rt_ref)
    got = seq(rt)
    assert got[:len(want)] == want or s.dropped
    ev = rt.events
    drafts = [i for i, e in enumerate(ev) if e[0] == "run" and e[1] == "draft"]
    preds = [i for i, e in enumerate(ev) if e[0] == "wait" and e[1] == "predictions"]
    fed = [d for d in drafts if ev[d - 1] == ("copy", "kv_lens", "next.draft_kv_lens")]
    assert len(fed) == s.queued_ahead
    for d in fed:                    # queued while the previous round is still unread
        k = drafts.index(d)
        assert preds[k - 1] > d      # round k − 1's predictions are read after it
        v = next(i for i in range(d, len(ev)) if ev[i][0] == "run" and ev[i][1] == "verify")
        assert [e for e in ev[d + 1:v]] == [("copy", "token_ids", "draft_tokens"),
                                          ("copy", "kv_lens", "next.verify_kv_lens")]
        before = max(i for i in range(d) if ev[i][0] == "run" and ev[i][1] == "verify")
        assert not any(e[0] == "write" for e in ev[before:v])


@pytest.mark.parametrize("plan", PLANS[:3])
def test_a_fed_round_is_one_graph_captured_before_the_clock(plan):
    """With graphs (``round_graph`` "memcpy", the default) every round queued ahead is one sequence:
    the feed copies, draft, copies, verify and the precompute of all its rows, captured with
    the run's other graphs; the reads follow it. ``round_graph="off"``: the same runs, a
    graph each, the same tokens; ``"kernel"``: the same with the copies in the copy kernel."""
    prompt = list(range(10, 20))
    res, rt = pipelined(prompt, plan, steps=60, chunk=4)
    off, rt_off = pipelined(prompt, plan, steps=60, chunk=4, round_graph="off")
    ker, rt_ker = pipelined(prompt, plan, steps=60, chunk=4, round_graph="kernel")
    same(res, off)
    same(res, ker)
    assert seq(rt) == seq(rt_off) == seq(rt_ker) and res.spec.round_log == off.spec.round_log
    assert rt.uncaptured == [] and [k for _, k in rt.captured_sequences] == [False]
    assert rt_ker.uncaptured == [] and [k for _, k in rt_ker.captured_sequences] == [True]
    ev = rt.events
    clock = next(i for i, e in enumerate(ev) if e[0] == "run")
    assert [i for i, e in enumerate(ev) if e[0] == "capture_sequence"][-1] < clock
    fed = [i for i, e in enumerate(ev) if e[0] == "sequence"]
    assert len(fed) == res.spec.queued_ahead >= 3
    assert not any(e[0] == "sequence" for e in rt_off.events)
    for i in fed:
        got = [e[:2] if e[0] == "run" else e for e in ev[i + 1:i + 12]]
        assert got == [("copy", "token_ids", "next.token_ids"),
                       ("copy", "positions", "next.positions"),
                       ("copy", "slots", "next.positions"),
                       ("copy", "kv_lens", "next.draft_kv_lens"), ("run", "draft"),
                       ("copy", "token_ids", "draft_tokens"),
                       ("copy", "kv_lens", "next.verify_kv_lens"), ("run", "verify"),
                       ("run", "draft_precompute"),
                       ("read_async", "draft_tokens"), ("read_async", "predictions")]
        assert ev[i + 9][2] == ev[i + 8][2] == {"tokens": 8}     # all k + 1 rows


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("steps", [2, 9, 17, 18, 19, 30])
def test_pipelining_stops_short_of_the_step_limit_and_the_capacity(plan, steps):
    """A round is queued ahead only when it fits whatever the previous accepts: no verify
    longer than the steps need, no slot past the capacity (the fake refuses one); dropped
    rounds are counted."""
    prompt = [5, 6, 7, 8]
    cap = len(prompt) + steps + 3
    plain = plain_run(prompt, steps=steps, chunk=4, capacity=cap)
    res, rt = pipelined(prompt, plan, steps=steps, chunk=4, capacity=cap)
    same(res, plain)
    for e in rt.runs("draft"):
        assert e[4] + 7 <= cap
    assert res.spec.dropped <= 1


def test_pipelined_eos_drops_the_round_queued_ahead():
    prompt = list(range(10, 20))
    toks = plain_run(prompt, steps=60, chunk=4).tokens
    eos = {next(t for i, t in enumerate(toks) if i >= 20 and t not in toks[:i])}
    plain = plain_run(prompt, steps=60, chunk=4, eos=eos)
    res, rt = pipelined(prompt, None, steps=60, chunk=4, eos=eos)
    same(res, plain)
    assert res.stop == "eos" and res.spec.dropped == 1
    assert rt.events[-1][0] == "wait"            # the dropped round's reads are waited for


def test_a_gpu_timer_or_no_ahead_selects_the_chained_loop():
    prompt = list(range(10, 20))
    rt = DSparkRuntime(block=7, mask=MASK, vocab=VOCAB, accepting=True)
    res, _ = ds_run(prompt, rt=rt, steps=30, chunk=4, pipeline=True,
                    gpu_timer=lambda: FakeEvent(rt))
    assert not res.spec.pipelined and res.spec.gpu_rounds == res.spec.rounds
    res, _ = pipelined(prompt, None, steps=30, chunk=4, ahead=False)
    assert not res.spec.pipelined and res.spec.queued_ahead == 0


def test_the_prompt_chunks_run_the_prefill_precompute_where_the_manifest_has_it():
    prompt = list(range(10, 20))
    ref, rt_ref = ds_run(prompt, steps=20, chunk=4)
    res, rt = ds_run(prompt, steps=20, chunk=4, prefill_precompute=True)
    same(res, ref)
    assert [s for s in seq(rt) if s[0] == "draft_precompute_prefill"] == [
        ("draft_precompute_prefill", 0, 4), ("draft_precompute_prefill", 4, 4),
        ("draft_precompute_prefill", 8, 1)]
    swap = {"draft_precompute_prefill": "draft_precompute"}
    assert [(swap.get(p, p), q, t) for p, q, t in seq(rt)] == seq(rt_ref)
    caps = {(e[1], e[2]["tokens"]) for e in rt.events if e[0] == "capture"}
    assert ("draft_precompute_prefill", 4) in caps and not rt.uncaptured


def test_no_acceptance_is_one_token_per_round_and_lossless():
    prompt = [5, 1, 2]
    plain = plain_run(prompt, steps=12, chunk=4)
    res, rt = ds_run(prompt, plan=lambda r, p: 0, steps=12, chunk=4, ahead=False)
    same(res, plain)
    s = res.spec
    # 11 tokens after the first: rounds of 1 token while ≥ 2 steps are left, then one decode
    assert s.rounds == 10 and s.tau == 1.0 and s.decode_steps == 1
    assert s.conditional[0] == 0.0 and s.acceptance == [0.0] * 7
    assert [e[2]["tokens"] for e in rt.runs("draft_precompute")][2:] == [1] * 9
    assert seq(rt)[-1] == ("decode", len(prompt) + 10, 1) and s.tail_reason == "one step left"


def test_partial_acceptance_precomputes_exactly_the_accepted_rows():
    prompt = [9, 9, 8, 7, 6]
    plain = plain_run(prompt, steps=30, chunk=8)
    res, rt = ds_run(prompt, plan=lambda r, p: 3, steps=30, chunk=8, ahead=False)
    same(res, plain)
    # the prompt's two precomputes (its one chunk, decode_spec's row), then the rounds
    rounds = [e for e in rt.runs() if e[1] in ("verify", "draft_precompute")][2:]
    pairs = list(zip(rounds[::2], rounds[1::2]))
    assert pairs and all(v[1] == "verify" and pc[1] == "draft_precompute" for v, pc in pairs)
    for v, pc in pairs:                               # 3 drafts accepted + the correction
        assert (pc[4], pc[2]["tokens"]) == (v[4], 4)
    s = res.spec
    assert s.conditional[:4] == [1.0, 1.0, 1.0, 0.0]
    assert s.acceptance == [1.0, 1.0, 1.0] + [0.0] * 4 and s.tau == 4.0


def test_capacity_edge_finishes_with_plain_decode():
    prompt = [1, 2, 3, 4]
    steps = 20
    cap = len(prompt) + steps                         # exactly what the run needs
    plain = plain_run(prompt, steps=steps, chunk=4, capacity=cap)
    res, rt = ds_run(prompt, steps=steps, chunk=4, capacity=cap)
    same(res, plain)
    drafts = [e[4] for e in rt.runs("draft")]
    assert drafts == [4, 12] and all(p + 7 <= cap for p in drafts)
    # after the round at 12 (8 tokens), the anchor sits at 20: 20 + 7 > 24, no more drafting
    tail = [e for e in seq(rt) if e[1] >= 20]
    assert tail == [("decode", 20, 1), ("decode", 21, 1), ("decode", 22, 1)]
    assert res.spec.decode_steps == 3 and "pass the capacity 24" in res.spec.tail_reason
    assert max(e[4] + e[2]["tokens"] for e in rt.runs()) <= cap - 1


def test_step_edge_shortens_the_last_verify():
    prompt = [4, 4, 2]
    for steps in (9, 10, 11, 12, 16):
        plain = plain_run(prompt, steps=steps, chunk=4)
        res, rt = ds_run(prompt, steps=steps, chunk=4)
        same(res, plain)
        widths = [e[2]["tokens"] for e in rt.runs("verify")]
        # 1 + 8 tokens, then L = steps − 9 left: a round of L − 1 drafts (verify width L)
        # when L ≥ 2, one plain decode when L = 1
        left = steps - 9
        assert widths == [8] + ([left] if left >= 2 else [])
        assert res.spec.decode_steps == (left == 1)


def test_eos_inside_a_round_stops_there():
    prompt = [7, 7, 2, 9]
    full = plain_run(prompt, steps=30, chunk=4)
    eos = {full.tokens[10]}
    plain = plain_run(prompt, steps=30, chunk=4, eos=eos)
    assert plain.stop == "eos"
    res, rt = ds_run(prompt, steps=30, chunk=4, eos=eos, ahead=False)
    same(res, plain)
    assert seq(rt)[-1][0] == "verify"                 # no precompute after the stop
    ahead, _ = ds_run(prompt, steps=30, chunk=4, eos=eos)
    same(ahead, plain)                    # ahead: queued before the EOS is seen, harmless
    v = rt.runs("verify")[-1]
    assert v[4] + v[2]["tokens"] > len(prompt) + len(plain.tokens)


def test_first_token_eos_and_one_step():
    prompt = [1, 2, 3]
    one = plain_run(prompt, steps=1, chunk=4)
    res, rt = ds_run(prompt, steps=1, chunk=4)
    same(res, one)
    assert [e[0] for e in seq(rt)] == ["prefill", "draft_precompute", "decode_spec",
                                       "draft_precompute"]
    res, rt = ds_run(prompt, steps=9, chunk=4, eos={one.tokens[0]})
    assert res.stop == "eos" and res.tokens == [] and not rt.runs("draft")


def test_the_fake_refuses_a_stale_draft_kv_and_a_wrong_precompute():
    """The checks the loop is tested against do bite."""
    from kern_run.inputs import Inputs
    rt = DSparkRuntime(block=4, mask=MASK, vocab=VOCAB)
    inp = Inputs(16, VOCAB, table_pages=rt.table_pages)
    inp.write(rt, [1, 2, 3], 0)
    rt.run("prefill", {"tokens": 3}, graph=False)
    with pytest.raises(Violation, match="expected 3"):
        rt.run("draft_precompute", {"tokens": 2}, graph=False)
    rt.run("draft_precompute", {"tokens": 3}, graph=False)
    inp.write(rt, [5, MASK, MASK, MASK], 4, kv_len=8)  # position 3 never precomputed
    with pytest.raises(Violation, match="position 3"):
        rt.run("draft", {"tokens": 4}, graph=False)
    inp.write(rt, [5, MASK, MASK, MASK], 3)           # causal kv_lens: wrong for the draft
    with pytest.raises(Violation, match="kv_lens"):
        rt.run("draft", {"tokens": 4}, graph=False)


def test_time_split_tiles_the_round_and_gpu_events():
    ticks = iter(range(10_000))
    prompt = [3, 1, 4, 1, 5]
    rt = DSparkRuntime(block=7, mask=MASK, vocab=VOCAB, plan=lambda r, p: 2)
    res, _ = ds_run(prompt, rt=rt, steps=30, chunk=8, clock=lambda: next(ticks),
                    gpu_timer=lambda: FakeEvent(rt))
    s = res.spec
    assert s.rounds >= 3 and s.host_gaps == s.rounds
    assert s.draft_s + s.verify_s + s.host_s == pytest.approx(s.round_s)
    assert min(s.draft_s, s.verify_s, s.host_s) > 0
    # each event pair brackets exactly one run: one tick per program per round
    assert s.gpu_draft_ms == s.gpu_verify_ms == s.gpu_rounds == s.rounds
    assert s.gpu_precompute_ms == s.gpu_precomputes == len(rt.runs("draft_precompute")) - 2
    d = s.as_dict()
    assert d["gpu_draft_ms_per_round"] == 1.0 and d["drafter"] == "dspark"
    assert len(s.lines()) == 4 and "τ" in s.lines()[0]
    # the default loop is chained: its split is queue / wait; chain=False: draft / verify
    assert d["chained"] and "= queue " in s.lines()[2] and "+ wait " in s.lines()[2]
    assert d["ahead"] and "the precompute of its rows launched" in s.lines()[2]
    ticks = iter(range(10_000))                   # chained, precompute after the wait
    rt = DSparkRuntime(block=7, mask=MASK, vocab=VOCAB, plan=lambda r, p: 2)
    res, _ = ds_run(prompt, rt=rt, steps=30, chunk=8, clock=lambda: next(ticks),
                    gpu_timer=lambda: FakeEvent(rt), ahead=False)
    c = res.spec
    assert c.gpu_precompute_ms == c.gpu_precomputes == len(rt.runs("draft_precompute")) - 2
    assert not c.ahead and "(accept, emit, precompute launch)" in c.lines()[2]
    ticks = iter(range(10_000))
    res, _ = ds_run(prompt, rt=DSparkRuntime(block=7, mask=MASK, vocab=VOCAB,
                                             plan=lambda r, p: 2),
                    steps=30, chunk=8, clock=lambda: next(ticks), chain=False)
    u = res.spec
    assert not u.as_dict()["chained"] and "= draft " in u.lines()[2]
    assert "+ verify " in u.lines()[2]


def test_stats_conditional_acceptance():
    from kern_run.spec.dspark_stats import DSparkStats
    s = DSparkStats(k=4, block=4)
    s.record(4, 4, 5, 0.0)      # all accepted
    s.record(4, 1, 2, 0.0)      # d0 accepted, d1 rejected
    s.record(2, 0, 1, 0.0)      # a short round, d0 rejected
    assert s.accepted == [2, 1, 1, 1] and s.drafted == [3, 3, 2, 2]
    assert s.reached == [3, 2, 1, 1]
    assert s.conditional == [2 / 3, 1 / 2, 1.0, 1.0]
    assert s.acceptance == [2 / 3, 1 / 3, 1 / 2, 1 / 2] and s.tau == 8 / 3


def test_refusals():
    rt = DSparkRuntime(vocab=VOCAB)
    with pytest.raises(KernRunError, match="1 ≤ --spec-k ≤ 7"):
        dspark_generate(rt, [1], steps=4, chunk=4, max_tokens=16, draft=DraftSpec(7, 3), k=8)
    with pytest.raises(KernRunError, match="`verify` takes at most 4"):
        dspark_generate(rt, [1], steps=4, chunk=4, max_tokens=4, draft=DraftSpec(7, 3), k=5)
    with pytest.raises(KernRunError, match="--capacity"):
        dspark_generate(rt, [1] * 10, steps=10, chunk=4, max_tokens=16, capacity=16,
                        draft=DraftSpec(7, 3))
    with pytest.raises(KernRunError, match="--steps"):
        dspark_generate(rt, [1], steps=0, chunk=4, max_tokens=16, draft=DraftSpec(7, 3))
    assert rt.events == []


def test_random_drafts_on_the_random_model_stay_lossless():
    rng = np.random.default_rng(5)
    prompt = rng.integers(0, VOCAB, 25).tolist()
    plain = plain_run(prompt, model="random", steps=48, chunk=8)
    plan = lambda r, p: int(rng.integers(0, 8))  # noqa: E731
    res, _ = ds_run(prompt, model="random", plan=plan, steps=48, chunk=8)
    same(res, plain)
    assert res.spec.rounds > 5


def test_host_time_per_round_is_small():
    """The loop's whole round on a runtime that computes nothing: input writes, launches,
    reads, accept, emit (a real round adds the GPU time on top). Loose bound for a shared CI
    machine; the printed numbers are the measurement."""
    from dspark_fakes import NullDSpark
    best = None
    for _ in range(3):
        res = dspark_generate(NullDSpark(), [1, 2, 3, 4, 5] * 20, steps=800, chunk=16,
                              max_tokens=16, draft=DraftSpec(7, 0))
        s = res.spec
        assert s.rounds >= 99 and s.tau == pytest.approx(8, 0.02)
        per = 1e6 * s.round_s / s.rounds
        best = per if best is None else min(best, per)
    print(f"DSpark round on a null runtime: {best:.0f} µs (host {1e6 * s.host_s / s.rounds:.0f})")
    assert best < 2000, f"{best:.0f} µs of host work per round"


def test_an_unknown_round_graph_is_refused():
    with pytest.raises(KernRunError, match="round_graph 'on': use one of memcpy, kernel, off"):
        pipelined(list(range(10, 20)), None, steps=20, chunk=4, round_graph="on")
