"""The fake paged runtime itself: prefix writes, copies, reads, refusals, and that its token
depends on exactly the keys a row reads."""

from __future__ import annotations

import numpy as np
import pytest

from kern_run.engine.fake import FakePagedRuntime, FakeRuntimeError, fold, kv_value
from kern_run.generate import generate


def one_row(rt, token, pos, table_row, kv_len=None, program="decode"):
    """Write one row at ``pos`` through ``table_row`` and run it; its next_token."""
    slot = int(table_row[pos // 16]) * 16 + pos % 16
    rt.write("token_ids", np.array([token], np.int64))
    rt.write("positions", np.array([pos], np.int64))
    rt.write("slots", np.array([slot], np.int64))
    rt.write("kv_lens", np.array([pos + 1 if kv_len is None else kv_len], np.int32))
    rt.write("block_table", np.array([table_row], np.int32))
    rt.run(program, {"tokens": 1})
    return int(rt.read("next_token", {"tokens": 1})[0])


def test_token_is_the_hash_of_the_keys_read_in_order():
    rt = FakePagedRuntime(64, max_tokens=4, vocab=1 << 30)
    row = [2, 3, 0, 0]
    one_row(rt, 5, 0, row, program="prefill")
    got = one_row(rt, 6, 1, row)
    keys = kv_value(np.array([5, 6]), np.array([0, 1]))
    assert got == fold(keys) % (1 << 30)
    assert got != fold(keys[::-1]) % (1 << 30)            # order matters


def test_a_wrong_kv_len_or_an_unwritten_slot_changes_the_token():
    rt = FakePagedRuntime(64, max_tokens=4, vocab=1 << 30, seed=5)
    row = [1, 0, 0, 0]
    one_row(rt, 5, 0, row, program="prefill")
    good = one_row(rt, 6, 1, row)
    assert one_row(rt, 6, 1, row, kv_len=3) != good      # slot 18 holds poison
    assert one_row(rt, 6, 1, row, kv_len=1) != good


def test_prefix_writes_keep_the_rest_and_copy_moves_rows():
    rt = FakePagedRuntime(64, max_tokens=4)
    rt.write("token_ids", np.array([1, 2, 3, 4], np.int64))
    rt.write("token_ids", np.array([9], np.int64))
    assert rt.buffers["token_ids"].tolist() == [9, 2, 3, 4]
    rt.buffers["next_token"][:] = [7, 8, 0, 0]
    rt.copy("token_ids", "next_token", {"tokens": 2})
    assert rt.buffers["token_ids"].tolist() == [7, 8, 3, 4]
    pending = rt.read_async("next_token", {"tokens": 2})
    rt.buffers["next_token"][:] = 0                       # a later run: the read is earlier
    assert pending.wait().tolist() == [7, 8]


@pytest.mark.parametrize("call, match", [
    (lambda rt: rt.run("batch", {"tokens": 5}), r"outside \[1, 4\]"),
    (lambda rt: rt.run("decode", {"tokens": 2}), "tokens = 1"),
    (lambda rt: rt.run("verify", {"tokens": 1}), "unknown program"),
    (lambda rt: rt.capture("batch", {"tokens": 8}), r"outside \[1, 4\]"),
    (lambda rt: rt.write("next_token", np.zeros(1, np.int64)), "not an input"),
    (lambda rt: rt.write("kv_lens", np.zeros(1, np.int64)), "dtype"),
    (lambda rt: rt.write("slots", np.zeros(5, np.int64)), "room for 4"),
])
def test_refusals(call, match):
    with pytest.raises(FakeRuntimeError, match=match):
        call(FakePagedRuntime(64, max_tokens=4))


def test_slot_beyond_the_pool_is_refused():
    rt = FakePagedRuntime(32, max_tokens=4)
    with pytest.raises(FakeRuntimeError, match="row 0"):
        one_row(rt, 1, 0, [2, 0])                         # page 2 = slots 32…47


def test_plain_mode_runs_generate():
    rt = FakePagedRuntime(256, max_tokens=8, vocab=50, plain=True)
    r = generate(rt, [1, 2, 3, 4, 5], steps=6, chunk=4, max_tokens=8, vocab=50)
    assert len(r.tokens) == 6
    again = generate(FakePagedRuntime(256, max_tokens=8, vocab=50, plain=True, seed=3),
                     [1, 2, 3, 4, 5], steps=6, chunk=4, max_tokens=8, vocab=50)
    assert again.tokens == r.tokens                       # the poison is never read


def test_plain_mode_fills_in_only_inputs_never_written():
    def run(rt, write_slots):
        rt.write("token_ids", np.array([4, 5], np.int64))
        rt.write("positions", np.array([16, 17], np.int64))
        if write_slots:
            rt.write("slots", np.array([0, 0], np.int64))
        rt.run("prefill", {"tokens": 2})
    plain = FakePagedRuntime(64, max_tokens=4, plain=True)
    run(plain, write_slots=False)                         # slot = position, identity table
    assert plain.kv[16:18].tolist() == kv_value(np.array([4, 5]), np.array([16, 17])).tolist()
    with pytest.raises(FakeRuntimeError, match="slot 0 is not position"):
        run(FakePagedRuntime(64, max_tokens=4, plain=True), write_slots=True)   # written: wins
    with pytest.raises(FakeRuntimeError, match="slot 0 is not position"):
        run(FakePagedRuntime(64, max_tokens=4), write_slots=False)  # strict: slots all 0
