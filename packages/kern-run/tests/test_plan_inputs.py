import numpy as np
import pytest

from kern_run.chunks import (Call, check_capacity, clamp_chunk, decode_call,
                             graph_keys,
                             plan_prompt)
from kern_run.errors import KernRunError
from kern_run.inputs import Inputs, call_inputs


def shape(calls):
    return [(c.program, c.pos0, c.tokens, c.graph) for c in calls]


def test_one_token_prompt_is_one_decode():
    assert shape(plan_prompt(1, 512, 2048)) == [("decode", 0, 1, True)]


def test_two_tokens_prefill_one_then_decode():
    # the single prefill token is a tail chunk (shorter than the chunk): eager
    assert shape(plan_prompt(2, 512, 2048)) == [("prefill", 0, 1, False), ("decode", 1, 1, True)]


def test_chunk_boundaries():
    # n - 1 = 8 = 2 full chunks of 4
    assert shape(plan_prompt(9, 4, 16)) == [("prefill", 0, 4, True), ("prefill", 4, 4, True),
                                            ("decode", 8, 1, True)]
    # n - 1 = 9: two full chunks and a tail of 1
    assert shape(plan_prompt(10, 4, 16)) == [("prefill", 0, 4, True), ("prefill", 4, 4, True),
                                             ("prefill", 8, 1, False), ("decode", 9, 1, True)]
    # n - 1 = 3 < chunk: one tail chunk
    assert shape(plan_prompt(4, 4, 16)) == [("prefill", 0, 3, False), ("decode", 3, 1, True)]


def test_chunk_one_is_all_graphs():
    calls = plan_prompt(4, 1, 16)
    assert shape(calls) == [("prefill", i, 1, True) for i in range(3)] + [("decode", 3, 1, True)]
    assert graph_keys(calls) == [("prefill", 1), ("decode", 1)]


def test_chunk_clamped_to_tokens_max():
    assert clamp_chunk(512, 128) == 128
    assert clamp_chunk(64, 128) == 64
    calls = plan_prompt(300, 512, 128)
    assert [c.tokens for c in calls] == [128, 128, 43, 1]
    assert all(c.tokens <= 128 for c in calls)


def test_every_prompt_token_covered_once():
    for n in range(1, 40):
        for chunk in (1, 3, 7, 64):
            calls = plan_prompt(n, chunk, 16)
            pos = [p for c in calls for p in c.positions]
            assert pos == list(range(n))
            assert calls[-1] == decode_call(n - 1)


def test_eager_turns_graphs_off():
    assert all(not c.graph for c in plan_prompt(20, 4, 16, eager=True))
    assert graph_keys(plan_prompt(20, 4, 16, eager=True)) == []


@pytest.mark.parametrize("chunk", [0, -3])
def test_bad_chunk(chunk):
    with pytest.raises(KernRunError, match="--chunk must be at least 1"):
        plan_prompt(5, chunk, 16)


def test_empty_prompt():
    with pytest.raises(KernRunError, match="no tokens"):
        plan_prompt(0, 4, 16)


def test_capacity():
    check_capacity(10, 6, 16)
    with pytest.raises(KernRunError, match="--capacity 15 is too small.*at least 16"):
        check_capacity(10, 6, 15)


def test_fixed_context():
    check_capacity(10, 6, 16, fixed=True)
    with pytest.raises(KernRunError) as ei:
        check_capacity(10, 7, 16, fixed=True)
    assert "needs 17 positions; this model's context is 16" in str(ei.value)
    assert "--steps to at most 6" in str(ei.value) and "--capacity" not in str(ei.value)


def test_call_symbols():
    assert Call("prefill", 4, 3, True).symbols == {"tokens": 3}


def test_input_bytes():
    arrs = call_inputs([5, 6, 7], 10, table_pages=3)
    assert set(arrs) == {"token_ids", "positions", "slots", "pos0", "kv_lens", "block_table"}
    assert arrs["slots"].tobytes() == arrs["positions"].tobytes()
    assert arrs["kv_lens"].dtype == np.dtype("<i4") and arrs["kv_lens"].tolist() == [11, 12, 13]
    assert arrs["block_table"].dtype == np.dtype("<i4")
    assert arrs["block_table"].tolist() == [[0, 1, 2]] * 3
    assert arrs["token_ids"].dtype == np.dtype("<i8")
    assert arrs["token_ids"].tobytes() == b"".join(i.to_bytes(8, "little") for i in (5, 6, 7))
    assert arrs["positions"].tobytes() == b"".join(i.to_bytes(8, "little") for i in (10, 11, 12))
    assert arrs["pos0"].dtype == np.dtype("<i4")
    assert arrs["pos0"].tobytes() == (10).to_bytes(4, "little")


def test_inputs_are_prefix_views_and_reusable():
    inp = Inputs(8)
    a = inp.fill([1, 2, 3, 4], 0)
    assert a["token_ids"].shape == (4,) and a["positions"].shape == (4,)
    b = inp.fill([9], 4)
    assert b["token_ids"].tolist() == [9] and b["positions"].tolist() == [4]
    assert b["pos0"].tolist() == [4]


class _Rec:
    def __init__(self) -> None:
        self.log: list = []

    def write(self, name, array) -> None:
        self.log.append((name, np.array(array)))


def test_identity_table_is_written_once_per_row_count_and_stops_at_the_capacity():
    rec, inp = _Rec(), Inputs(8, table_pages=6, capacity=40)   # 40 positions: pages 0..2
    inp.write(rec, [1], 0)
    inp.write(rec, [1, 2, 3], 1)
    inp.write(rec, [4, 5], 4)                                   # fewer rows: not rewritten
    tables = [a for n, a in rec.log if n == "block_table"]
    assert [t.tolist() for t in tables] == [[[0, 1, 2, 0, 0, 0]],
                                            [[0, 1, 2, 0, 0, 0]] * 3]


def test_inputs_refuse_bad_calls():
    inp = Inputs(4, vocab=10)
    with pytest.raises(KernRunError, match="1…4 tokens, not 5"):
        inp.fill([1] * 5, 0)
    with pytest.raises(KernRunError, match="token id 10 is outside"):
        inp.fill([1, 10], 0)
    with pytest.raises(KernRunError, match="i32"):
        inp.fill([1], 2**31)
