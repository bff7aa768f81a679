"""kern-run's capacity choice (``kern_run.capacity.choose``): the model's position limit by
default, the largest that fits in free GPU memory otherwise, and every refusal in one line."""

from __future__ import annotations

import dataclasses
import pytest
from kern_manifest.contract import ContractInfo

from kern_run.capacity import DEFAULT_CAPACITY, RESERVE, ROUND, choose
from kern_run.errors import KernRunError

GB = 10**9
QWEN3 = ContractInfo(model="q", max_tokens=2048, vocab=151936, kv_bytes_per_token=147456,
                     position_limit=40960)


def test_default_is_the_position_limit_when_it_fits():
    c = choose(None, QWEN3, base_bytes=9 * GB, free_bytes=140 * GB)
    assert (c.limit, c.load, c.kv_bytes) == (40960, 40960, 40960 * 147456)
    assert c.line() == ("kern-run: KV capacity 40960 tokens (6.04 GB of KV; the model's "
                        "position limit)")


def test_default_shrinks_to_what_fits():
    free = 9 * GB + RESERVE + 1000 * 147456 + 5
    c = choose(None, QWEN3, base_bytes=9 * GB, free_bytes=free)
    assert c.limit == c.load == 1000 // ROUND * ROUND
    assert "the most that fits" in c.line() and "the model's limit is 40960" in c.line()


def test_nothing_fits():
    with pytest.raises(KernRunError, match="not enough for 9.00 GB of weights"):
        choose(None, QWEN3, base_bytes=9 * GB, free_bytes=9 * GB + RESERVE)


def test_requested_capacity_is_kept_if_it_fits():
    c = choose(3000, QWEN3, base_bytes=9 * GB, free_bytes=140 * GB)
    # the pool is whole 16-slot pages: 3000 positions load 3008 slots
    assert (c.limit, c.load) == (3000, 3008) and "--capacity" in c.line()
    assert c.kv_bytes == 3008 * QWEN3.kv_bytes_per_token


def test_pool_slots_round_to_pages_within_the_limit():
    from kern_run.capacity import pool_slots
    assert [pool_slots(n, 64) for n in (1, 16, 17, 33, 64)] == [16, 16, 32, 48, 64]
    assert [pool_slots(n, 40) for n in (33, 40)] == [32, 32]        # a limit inside a page
    assert pool_slots(40, 48) == 48 and pool_slots(44, 44) == 32    # never past the limit
    c = choose(44, dataclasses.replace(QWEN3, position_limit=44))
    assert (c.limit, c.load) == (32, 32)


def test_requested_above_the_position_limit_is_refused():
    with pytest.raises(KernRunError) as ei:
        choose(40961, QWEN3)
    assert "--capacity 40961 exceeds this model's position limit 40960" in str(ei.value)


def test_requested_that_does_not_fit_is_refused():
    with pytest.raises(KernRunError) as ei:
        choose(32768, QWEN3, base_bytes=9 * GB, free_bytes=12 * GB)
    msg = str(ei.value)
    assert "--capacity 32768 needs 4.83 GB of KV state" in msg and "leave room for" in msg


def test_without_a_declared_limit_the_default_capacity():
    info = ContractInfo(model="t", max_tokens=64, vocab=None, kv_bytes_per_token=64)
    assert choose(None, info).limit == DEFAULT_CAPACITY
    assert choose(100000, info).limit == 100000         # nothing to check it against


def test_a_fixed_state():
    info = ContractInfo(model="t", max_tokens=64, vocab=None, kv_bytes_per_token=0,
                        kv_bytes_fixed=4096)
    c = choose(None, info)
    assert (c.limit, c.load, c.kv_bytes) == (64, None, 4096)
    with pytest.raises(KernRunError, match="does not apply to this model"):
        choose(128, info)
