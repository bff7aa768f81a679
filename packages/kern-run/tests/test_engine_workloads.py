"""Random workloads through the engine over the fake paged runtime: every request's tokens
equal batch-1 greedy's for its prompt, every request ends with exactly one finish event, and
every page is free at the end (engine_driver.check_outcome)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from engine_driver import VOCAB, Arrival, check_outcome, drive, make_engine, reference
from kern_run.engine import Request

LENGTHS = st.one_of(st.sampled_from([1, 2, 15, 16, 17, 31, 32, 33]), st.integers(1, 80))


@st.composite
def workloads(draw):
    pages = draw(st.integers(3, 24))                   # pool pages, the pad page included
    cfg = dict(capacity=16 * pages, max_seqs=draw(st.integers(1, 16)),
               chunk=draw(st.integers(1, 16)), max_prefill_tokens=draw(st.integers(1, 40)),
               eos=frozenset(draw(st.sets(st.integers(0, VOCAB - 1), max_size=2))),
               graphs=draw(st.booleans()), seed=draw(st.integers(0, 3)))
    arrivals = []
    for i in range(draw(st.integers(1, 12))):
        n = draw(LENGTHS)
        req = Request(f"r{i}", tuple(draw(st.lists(st.integers(0, VOCAB - 1), min_size=n,
                                                    max_size=n))),
                      max_tokens=draw(st.integers(1, 40)),
                      stop_token_ids=frozenset(draw(st.sets(st.integers(0, VOCAB - 1),
                                                            max_size=1))),
                      ignore_eos=draw(st.booleans()))
        kind = draw(st.sampled_from(["none", "none", "none", "decode", "prefill"]))
        arrivals.append(Arrival(draw(st.integers(0, 30)), req,
                                abort_after=draw(st.integers(0, 5)) if kind == "decode" else None,
                                abort_in_prefill=kind == "prefill"))
    return cfg, arrivals


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_random_workloads_match_batch1(w):
    cfg, arrivals = w
    engine = make_engine(**cfg)
    out = drive(engine, arrivals)
    check_outcome(engine, arrivals, out)
    for a in arrivals:
        fin = [e.finish for e in out.events[a.req.id] if e.finish]
        event(f"finish {fin[0] if fin else 'refused'}")
    event(f"waited {out.max_waiting > 0}")
    pool = cfg["capacity"] - 16
    for a in arrivals:   # refused exactly when it can never fit the pool
        need = len(a.req.prompt) + a.req.max_tokens
        assert (a.req.id in out.refused) == (need > pool), (a.req.id, need, pool)


def test_small_pool_makes_requests_wait_and_all_finish():
    """Four requests of 3 pages each in a pool of 4 usable pages: one runs at a time."""
    engine = make_engine(capacity=16 * 5, chunk=8, eos=frozenset())
    arrivals = [Arrival(0, Request(f"w{i}", tuple((7 * i + j) % VOCAB for j in range(17)),
                                   max_tokens=20)) for i in range(4)]
    seen_waiting = 0
    out = None
    engine_step = engine.step

    def step():
        nonlocal seen_waiting
        events = engine_step()
        seen_waiting = max(seen_waiting, engine.stats().waiting)
        assert engine.stats().running <= 1
        return events

    engine.step = step
    out = drive(engine, arrivals)
    check_outcome(engine, arrivals, out)
    assert seen_waiting == 3
    assert out.refused == {}


def test_long_prompts_prefill_over_several_steps():
    engine = make_engine(capacity=16 * 40, chunk=16, max_prefill_tokens=20, eos=frozenset())
    arrivals = [Arrival(0, Request("long", tuple(j % VOCAB for j in range(300)), 5)),
                Arrival(0, Request("short", (3, 4), 30)),
                Arrival(2, Request("mid", tuple(range(17)), 8))]
    out = drive(engine, arrivals)
    check_outcome(engine, arrivals, out)
    # 299 prefill tokens at 20 per step (the other prompts' share included): ≥ 15 steps
    assert out.steps >= 15
    assert engine.stats().prefill_chunks >= 299 // 16


def test_identical_prompts_together_give_identical_outputs():
    engine = make_engine(capacity=16 * 64, chunk=8, eos=frozenset({5}))
    prompt = tuple((3 * j + 1) % VOCAB for j in range(21))
    arrivals = [Arrival(0, Request(f"same{i}", prompt, max_tokens=12)) for i in range(16)]
    out = drive(engine, arrivals)
    check_outcome(engine, arrivals, out)
    first = out.tokens["same0"]
    assert all(out.tokens[f"same{i}"] == first for i in range(16))
    assert engine.stats().step_counts.get(16, 0) >= 1
    runs = engine.rt.calls("run")
    assert ("run", "batch", 16, True) in runs


@pytest.mark.parametrize("n", [1, 15, 16, 17, 33])
def test_prompt_lengths_at_page_edges(n):
    engine = make_engine(capacity=16 * 12, chunk=16, eos=frozenset())
    a = tuple(j % VOCAB for j in range(n))
    arrivals = [Arrival(0, Request("a", a, 16)), Arrival(1, Request("b", a[::-1], 17))]
    out = drive(engine, arrivals)
    check_outcome(engine, arrivals, out)
    assert out.refused == {}
    assert out.tokens["a"] == list(reference(a, 16, frozenset())[0])
