"""Pipelining and the drain rule (from the fake's call log), aborts, stop rules, a failing
runtime, stats; and that the workload check fails on the bugs it is there to catch."""

from __future__ import annotations

import numpy as np
import pytest

from engine_driver import VOCAB, Arrival, check_outcome, drive, make_engine, reference
from kern_run.engine import Request, TokenEvent
from kern_run.engine.batchio import BatchInputs
from kern_run.engine.fake import FakeRuntimeError


def run_all(engine) -> list[TokenEvent]:
    out = []
    while engine.has_work():
        out += engine.step()
    return out


def segments(log: list[tuple]) -> list[list[tuple]]:
    """The log cut before each decode/batch run: the calls that prepared and followed it."""
    out: list[list[tuple]] = [[]]
    for e in log:
        if e[0] == "run" and e[1] in ("decode", "batch"):
            out.append([])
        out[-1].append(e)
    return out[1:]


def test_unchanged_rows_are_fed_on_the_device_and_queued_before_the_read():
    engine = make_engine(capacity=16 * 20, eos=frozenset())
    for i in range(3):
        engine.submit(Request(f"s{i}", (i + 2,), 9))
    evs = run_all(engine)
    log = engine.rt.log
    runs = [i for i, e in enumerate(log) if e[0] == "run"]
    assert len(runs) == 9                                 # never a step past max_tokens
    for k in range(1, 9):                                 # steps 2…9: fed
        between = log[runs[k - 1] + 1:runs[k]]
        assert ("copy", "token_ids", "next_token", 3) in between
        assert not any(e[:2] == ("write", "token_ids") for e in between)
        assert not any(e[:2] == ("write", "block_table") for e in between)
        # step k is queued before step k−1's read is waited for
        assert sum(e[0] == "wait" for e in log[:runs[k]]) == k - 1
    assert engine.stats().drains == 1
    for i in range(3):
        got = [e.token for e in evs if e.id == f"s{i}"]
        assert got == list(reference((i + 2,), 9, frozenset())[0])


def test_a_change_of_rows_drains_and_rewrites_every_input():
    engine = make_engine(capacity=16 * 20, eos=frozenset())
    engine.submit(Request("long", (1,), 8))
    engine.submit(Request("short", (2,), 3))
    run_all(engine)
    segs = segments(engine.rt.log)
    # step 4 is the first without "short" (it reached max_tokens 3): drained, rewritten
    before = engine.rt.log[:engine.rt.log.index(segs[3][0])]
    last_run = max(i for i, e in enumerate(before) if e[0] == "run")
    prep = before[last_run + 1:]
    assert ("wait", "next_token") in prep
    names = [e[1] for e in prep if e[0] == "write"]
    assert {"token_ids", "positions", "slots", "kv_lens", "block_table"} <= set(names)
    assert not any(e[0] == "copy" for e in prep)
    assert segs[3][0] == ("run", "decode", 1, True)       # one row left: bucket 1, decode


def test_a_new_arrival_and_its_prefill_force_a_drain():
    engine = make_engine(capacity=16 * 20, eos=frozenset())
    engine.submit(Request("a", (1,), 10))
    engine.step()
    engine.step()
    drains = engine.stats().drains
    engine.submit(Request("b", tuple(range(1, 9)), 4))
    engine.step()
    assert engine.stats().drains == drains + 1
    evs = run_all(engine)                                 # the outputs stay batch-1's
    assert [e.token for e in evs if e.id == "b"] == list(reference(tuple(range(1, 9)), 4,
                                                                   frozenset())[0])


def test_eos_ends_with_one_bare_stop_event_and_wastes_at_most_one_step():
    eos_prompt = None
    for t in range(VOCAB):           # a one-token prompt whose 3rd token is some id e
        ref, _ = reference((t,), 6, frozenset())
        if len(set(ref[:3])) == 3:
            eos_prompt, e = (t,), ref[2]
            break
    engine = make_engine(capacity=16 * 20, eos=frozenset({e}))
    engine.submit(Request("x", eos_prompt, 6))
    evs = run_all(engine)
    assert evs[:2] == [TokenEvent("x", ref[0]), TokenEvent("x", ref[1])]
    assert evs[2:] == [TokenEvent("x", None, "stop", e)]
    assert len(engine.rt.calls("run")) == 4             # 3 tokens + the one wasted step
    # the same id as a stop id, and ignored as EOS with ignore_eos
    engine = make_engine(capacity=16 * 20, eos=frozenset({e}))
    engine.submit(Request("y", eos_prompt, 6, ignore_eos=True))
    engine.submit(Request("z", eos_prompt, 6, stop_token_ids=frozenset({ref[0]})))
    evs = run_all(engine)
    assert [v.token for v in evs if v.id == "y" and v.token is not None] == list(ref)
    assert evs[-1].finish == "length"
    assert [v for v in evs if v.id == "z"] == [TokenEvent("z", None, "stop", ref[0])]


def test_length_finish_carries_the_last_token():
    engine = make_engine(capacity=16 * 20, eos=frozenset())
    engine.submit(Request("x", (4, 5), 3))
    evs = run_all(engine)
    ref = reference((4, 5), 3, frozenset())[0]
    assert evs == [TokenEvent("x", ref[0]), TokenEvent("x", ref[1]),
                   TokenEvent("x", ref[2], "length")]


def test_abort_frees_pages_at_once_and_reports_on_the_next_step():
    engine = make_engine(capacity=16 * 10, eos=frozenset(), max_prefill_tokens=4, chunk=4)
    engine.submit(Request("a", tuple(range(20)), 30))
    engine.submit(Request("w", (1,), 5))
    engine.step()
    assert engine.stats().pages_reserved == 4 + 1         # a: 20 + 30 − 1 = 49 slots; w: 5
    assert 0 < engine._live["a"].prefilled < 19           # a is mid-prefill
    engine.abort("a")
    assert engine.stats().pages_reserved == 1 and engine.stats().running == 1
    evs = engine.step()
    assert TokenEvent("a", None, "abort") in evs
    engine.abort("a")                                     # ended: no-op
    engine.abort("nobody")                                # unknown: no-op
    rest = run_all(engine)
    assert not any(e.id == "a" for e in rest)
    assert engine.pool.free_count == engine.pool.total


def test_abort_of_a_waiting_request():
    engine = make_engine(capacity=16 * 4, eos=frozenset())
    engine.submit(Request("big", (1,) * 30, 10))          # 39 slots: all 3 pages
    engine.submit(Request("later", (2,), 3))
    engine.step()
    assert engine.stats().waiting == 1
    engine.abort("later")
    assert engine.stats().waiting == 0
    evs = run_all(engine)
    assert [e for e in evs if e.id == "later"] == [TokenEvent("later", None, "abort")]


def test_a_failing_runtime_ends_running_sequences_with_error():
    engine = make_engine(capacity=16 * 10, eos=frozenset())
    engine.submit(Request("a", (1, 2, 3), 5))
    engine.step()
    real = engine.rt.run

    def broken(*a, **k):
        raise FakeRuntimeError("device fault")

    engine.rt.run = broken
    evs = engine.step()
    assert evs == [TokenEvent("a", None, "error")]
    assert "device fault" in str(engine.error)
    assert engine.pool.free_count == engine.pool.total
    engine.rt.run = real
    engine.submit(Request("b", (1, 2, 3), 2))             # the engine goes on
    evs = run_all(engine)
    assert [e.token for e in evs] == list(reference((1, 2, 3), 2, frozenset())[0])


def test_stats_count_pages_and_steps():
    engine = make_engine(capacity=16 * 10, eos=frozenset())
    engine.submit(Request("a", tuple(range(17)), 16))     # 32 slots: 2 pages
    engine.submit(Request("b", (1,), 1))                  # 1 slot: 1 page
    st = engine.stats()
    assert (st.running, st.waiting, st.pages_total, st.pages_reserved) == (0, 2, 9, 0)
    engine.step()
    st = engine.stats()
    assert (st.running, st.pages_reserved) == (2, 3)
    assert st.pages_used == 3                             # a: 16 prefilled + 1 row; b: 1 row
    run_all(engine)
    st = engine.stats()
    assert st.steps >= 16 and st.step_ms and st.host_ms_per_step > 0
    assert set(st.step_ms) == set(st.step_counts) == {1, 2}


# -- the check catches the bugs it exists for ------------------------------------------------
WORKLOAD = [Arrival(0, Request("a", tuple(j % VOCAB for j in range(19)), 12)),
            Arrival(0, Request("b", (3, 1, 4, 1, 5), 12)),
            Arrival(2, Request("c", tuple(range(1, 17)), 10))]


def test_the_workload_passes_unmodified():
    engine = make_engine(capacity=16 * 12, chunk=4, eos=frozenset())
    check_outcome(engine, WORKLOAD, drive(engine, WORKLOAD))


def test_check_catches_a_wrong_kv_len(monkeypatch):
    real = BatchInputs._positions

    def short(self, rows, b):
        real(self, rows, b)
        self.lens[:len(rows)] -= 1                        # forgets the row's own key
    monkeypatch.setattr(BatchInputs, "_positions", short)
    engine = make_engine(capacity=16 * 12, chunk=4, eos=frozenset())
    with pytest.raises(AssertionError):
        check_outcome(engine, WORKLOAD, drive(engine, WORKLOAD))


def test_check_catches_pages_that_alias(monkeypatch):
    from kern_run.engine import sequence
    real = sequence.Sequence.assign

    def shifted(self, got, width):
        real(self, got, width)
        self.table[:len(got)] = [(p + 1) // 2 for p in got]   # pages 2k−1 and 2k: one page

    def slots(self, pos0, count):
        pos = np.arange(pos0, pos0 + count, dtype=np.int64)
        return self.table[pos // 16].astype(np.int64) * 16 + pos % 16
    monkeypatch.setattr(sequence.Sequence, "assign", shifted)
    monkeypatch.setattr(sequence.Sequence, "slots", slots)
    monkeypatch.setattr(sequence.Sequence, "slot", lambda self, p: int(slots(self, p, 1)[0]))
    engine = make_engine(capacity=16 * 12, chunk=4, eos=frozenset())
    with pytest.raises(AssertionError):
        check_outcome(engine, WORKLOAD, drive(engine, WORKLOAD))


def test_check_catches_a_stale_token_fed_from_the_host(monkeypatch):
    from kern_run.engine import sequence
    monkeypatch.setattr(sequence.Sequence, "feed_token",
                        lambda self: self.req.prompt[-1])  # always the prompt's last token
    engine = make_engine(capacity=16 * 12, chunk=4, eos=frozenset())
    arrivals = WORKLOAD + [Arrival(5, Request("d", (2,), 3))]   # forces drains mid-decode
    with pytest.raises(AssertionError):
        check_outcome(engine, arrivals, drive(engine, arrivals))


def test_fake_refuses_a_slot_outside_the_rows_table():
    engine = make_engine(capacity=16 * 12, eos=frozenset())
    engine.submit(Request("a", (1, 2), 4))
    engine.step()
    rt = engine.rt
    rt.buffers["slots"][0] += 1                           # the row's slot, not its table's
    with pytest.raises(FakeRuntimeError, match="row 0"):
        rt.run("decode", {"tokens": 1})
    assert np.all(rt.buffers["kv_lens"][:1] == 2)


def test_stats_is_a_snapshot():
    engine = make_engine(capacity=16 * 10, eos=frozenset())
    engine.submit(Request("a", (1,), 3))
    before = engine.stats()
    before.step_counts[99] = 1
    run_all(engine)
    after = engine.stats()
    assert before.waiting == 1 and before.steps == 0
    assert 99 not in after.step_counts and after.waiting == 0
    assert (after.decode_steps, after.steps) == (3, 4)    # the 4th step only reads the 3rd
