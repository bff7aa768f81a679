"""The engine's step loop on the fake: refusals, buckets and pad rows, pipelining and the
drain rule, aborts, stop rules, the runtime failing, stats."""

from __future__ import annotations

import numpy as np
import pytest

from engine_driver import (TOKENS_MAX, VOCAB, Arrival, check_outcome, drive, make_engine,
                           reference)
from kern_manifest.contract import BLOCK_TABLE, KV_LENS, POSITIONS, SLOTS, TOKEN_IDS
from kern_run.engine import (Engine, EngineConfig, FakePagedRuntime, Refused, Request,
                             TokenEvent, default_buckets)
from kern_run.errors import KernRunError


def run_all(engine: Engine) -> list[TokenEvent]:
    out = []
    while engine.has_work():
        out += engine.step()
    return out


# -- refusals ---------------------------------------------------------------------------
@pytest.mark.parametrize("kw, req, code, param", [
    ({}, Request("a", (), 4), "invalid_prompt", "prompt"),
    ({}, Request("a", (1, VOCAB), 4), "invalid_prompt", "prompt"),
    ({}, Request("a", (1, -1), 4), "invalid_prompt", "prompt"),
    ({}, Request("a", (1, 2), 0), "invalid_request", "max_tokens"),
    ({}, Request("a", (1, 2), -3), "invalid_request", "max_tokens"),
    # the pool: 4 pages, 3 usable = 48 slots for one sequence
    ({}, Request("a", (1,) * 40, 9), "pool_too_small", "max_tokens"),
    ({}, Request("a", (1,) * 48, 1), "pool_too_small", "prompt"),
    ({"position_limit": 20}, Request("a", (1,) * 10, 11), "context_length_exceeded", "max_tokens"),
    ({"position_limit": 20}, Request("a", (1,) * 20, 1), "context_length_exceeded", "prompt"),
    ({"table_pages": 2}, Request("a", (1,) * 30, 3), "context_length_exceeded", "max_tokens"),
])
def test_refusals_name_code_and_param(kw, req, code, param):
    engine = make_engine(capacity=64, **kw)
    with pytest.raises(Refused) as exc:
        engine.submit(req)
    assert (exc.value.code, exc.value.param) == (code, param)
    assert len(str(exc.value).splitlines()) == 1
    assert not engine.has_work()


def test_the_limits_themselves_are_accepted():
    engine = make_engine(capacity=64)
    engine.submit(Request("pool", (1,) * 40, 8))          # 48 = capacity − the pad page
    engine2 = make_engine(capacity=64, position_limit=40)
    engine2.submit(Request("limit", (1,) * 39, 1))        # 40 = the position limit
    assert engine.stats().waiting == 1 and engine2.stats().waiting == 1


def test_duplicate_id_refused_while_live_then_free_again():
    engine = make_engine(capacity=128)
    engine.submit(Request("x", (1, 2), 3))
    with pytest.raises(Refused) as exc:
        engine.submit(Request("x", (3,), 3))
    assert (exc.value.code, exc.value.param) == ("duplicate_id", "id")
    run_all(engine)
    engine.submit(Request("x", (3,), 3))                    # ended: the id may come back
    evs = run_all(engine)
    assert [e.token for e in evs if e.token is not None] == list(reference((3,), 3,
                                                                           frozenset())[0])


@pytest.mark.parametrize("kw, match", [
    (dict(capacity=40), "capacity 40"), (dict(capacity=16), "capacity 16"),
    (dict(capacity=64, max_seqs=0), "max_seqs"), (dict(capacity=64, chunk=0), "chunk"),
    (dict(capacity=64, max_prefill_tokens=0), "max_prefill_tokens"),
    (dict(capacity=64, max_seqs=32, max_tokens=16), "max_seqs 32 exceeds"),
    (dict(capacity=64, max_seqs=8, buckets=(1, 4)), "buckets"),
    (dict(capacity=64, max_seqs=8, buckets=(4, 2, 8)), "buckets"),
    (dict(capacity=64, max_seqs=8, max_tokens=16, buckets=(1, 8, 32)), "buckets"),
])
def test_config_refusals(kw, match):
    kw.setdefault("max_tokens", TOKENS_MAX)
    kw.setdefault("max_seqs", 8)
    with pytest.raises(KernRunError, match=match):
        Engine(FakePagedRuntime(64, max_tokens=TOKENS_MAX), EngineConfig(**kw))


# -- buckets and pad rows -----------------------------------------------------------------
def test_default_buckets():
    assert default_buckets(64) == (1, 2, 4, 8, 16, 24, 32, 48, 64)
    assert default_buckets(256) == (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
    assert default_buckets(20) == (1, 2, 4, 8, 16, 20)
    assert default_buckets(3) == (1, 2, 3)
    assert default_buckets(64, max_tokens=12) == (1, 2, 4, 8, 12)


@pytest.mark.parametrize("rows, bucket, program", [(1, 1, "decode"), (2, 2, "batch"),
                                                   (3, 4, "batch"), (5, 8, "batch"),
                                                   (9, 16, "batch")])
def test_bucket_choice_and_pad_rows(rows, bucket, program):
    engine = make_engine(capacity=16 * 40, eos=frozenset())
    for i in range(rows):
        engine.submit(Request(f"s{i}", (i + 1,), 4))        # one token: no prefill
    engine.step()
    rt = engine.rt
    assert rt.calls("run")[-1] == ("run", program, bucket, True)
    assert ("capture", program, bucket) in rt.log
    b = rt.buffers
    assert (b[TOKEN_IDS][:rows] == np.arange(1, rows + 1)).all()
    # pad rows: token 0, position 0, slot 0, kv_len 1, a zero table row
    assert (b[TOKEN_IDS][rows:bucket] == 0).all() and (b[POSITIONS][rows:bucket] == 0).all()
    assert (b[SLOTS][rows:bucket] == 0).all() and (b[KV_LENS][rows:bucket] == 1).all()
    assert (b[BLOCK_TABLE][rows:bucket] == 0).all()
    # a sequence's row: its first page, never the pad page
    assert (b[BLOCK_TABLE][:rows, 0] > 0).all()
    assert (b[SLOTS][:rows] == b[BLOCK_TABLE][:rows, 0].astype(np.int64) * 16).all()


def test_eager_engine_captures_nothing():
    engine = make_engine(capacity=16 * 20, graphs=False, chunk=4, eos=frozenset())
    arrivals = [Arrival(0, Request("e", tuple(range(11)), 5))]
    check_outcome(engine, arrivals, drive(engine, arrivals))
    assert engine.rt.calls("capture") == []
    assert all(not r[3] for r in engine.rt.calls("run"))


def test_full_prefill_chunks_replay_graphs_and_the_tail_runs_eager():
    engine = make_engine(capacity=16 * 20, chunk=8, max_prefill_tokens=100, eos=frozenset())
    engine.submit(Request("p", tuple(j % VOCAB for j in range(20)), 2))
    engine.step()
    pre = [r for r in engine.rt.calls("run") if r[1] == "prefill"]
    assert pre == [("run", "prefill", 8, True), ("run", "prefill", 8, True),
                   ("run", "prefill", 3, False)]
    assert ("capture", "prefill", 8) in engine.rt.log
