"""The KV layout (``kern_gen.llama.kv.KVLayout``): per-layer K/V states, strides and bytes per
token, and that both examples' states, position domains and attention strides are the ones it
gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kern_gen.llama.command import PRESETS
from kern_gen.llama.config import load
from kern_gen.llama.ir import Ref
from kern_gen.llama.kv import KVLayout

ROOT = Path(__file__).resolve().parents[3]


def test_states_strides_and_bytes_per_token():
    kv = KVLayout(layers=3, kv_heads=2, max_len=8, head_dim=4)
    assert kv.bytes_per_token == 2 * 4 * 2 and kv.total_bytes_per_token == 6 * kv.bytes_per_token
    assert list(kv.states()) == ["kv.L0.k", "kv.L0.v", "kv.L1.k", "kv.L1.v", "kv.L2.k",
                                 "kv.L2.v"]
    assert set(kv.states().values()) == {kv.bytes_per_token}
    assert kv.k(2) == Ref(state="kv.L2.k") and kv.v(0) == Ref(state="kv.L0.v")
    assert kv.shape == [1, 8, 2, 4] and kv.strides == [64, 8, 4, 1]
    assert (kv.slot_stride, kv.head_stride) == (8, 4)


def test_a_table_that_does_not_cover_the_writers_bound_is_refused():
    """falsify.table_covers: exactly ceil(L / 16) pages per row (fewer cut contexts the
    writers fill, more name pages no capacity holds)."""
    from kern_gen.llama import falsify as F
    from kern_gen.llama.errors import WiringError
    kv = KVLayout(layers=1, kv_heads=2, max_len=8192, head_dim=64)
    F.table_covers(kv, 512, 16, "buffers.block_table")
    for bad in (511, 513):
        with pytest.raises(WiringError, match=f"block_table has {bad} pages of 16 slots per "
                                              f"row; the cache writers' bound L = 8192 needs "
                                              f"exactly 512"):
            F.table_covers(kv, bad, 16, "buffers.block_table")
    assert KVLayout(layers=1, kv_heads=2, max_len=8200, head_dim=64).table_pages == 513


@pytest.mark.parametrize("name", [p for p in PRESETS
                                  if (ROOT / PRESETS[p][2] / "manifest.json").exists()])
def test_examples_use_the_layout(name):
    out = ROOT / PRESETS[name][2]
    m = json.loads((out / "manifest.json").read_text())
    cfg = load(out / "config.json")
    sidecar = json.loads((ROOT / PRESETS[name][0] / "provider-sidecar.json").read_text())
    kv = KVLayout.of(cfg, sidecar["cache"]["max_len"])
    assert kv.max_len == cfg.max_positions
    assert m["states"] == {n: {"bytes_per_token": b} for n, b in kv.states().items()}
    for b in ("positions", "pos0"):
        assert m["buffers"][b]["domain"] == {"min": 0, "max": kv.max_len - 1}
    # the paged pool: slots and pages index the first K state (its capacity); the table
    # holds ceil(L / 16) pages a row
    pool = kv.state(0, "k")
    assert m["buffers"]["slots"]["domain"] == {"index_into": pool}
    assert m["buffers"]["block_table"]["domain"] == {"index_into": pool, "unit": 16}
    assert m["buffers"]["block_table"]["shape"] == ["tokens", -(-kv.max_len // 16)]
    assert m["buffers"]["kv_lens"]["domain"] == {"min": 1, "max": kv.max_len}
    step = m["kernels"]["prefill.attention"]["impl"]["steps"][0]
    assert step["args"][7:11] == [{"i64": kv.slot_stride}, {"i64": kv.head_stride}] * 2
    attn = next(d for d in m["programs"]["verify"]["dispatches"] if d["label"] == "L1.attn")
    assert attn["args"][1:3] == [{"state": "kv.L1.k"}, {"state": "kv.L1.v"}]
    # decode's: the rope folded into the attention (--attention cluster-rope), which writes
    # and reads layer 1's states
    fold = next(d for d in m["programs"]["decode"]["dispatches"]
                if d["label"] == "L1.attn.rope")
    assert [a for a in fold["args"] if "state" in a] == [{"state": "kv.L1.k"},
                                                         {"state": "kv.L1.v"}]
