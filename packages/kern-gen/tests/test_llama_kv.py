"""The KV layout (``kern_gen.llama.kv.KVLayout``): per-layer K/V offsets, strides and total
bytes, and that both examples' state and attention strides are the ones it gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kern_gen.llama.command import PRESETS
from kern_gen.llama.config import load
from kern_gen.llama.ir import KV, Ref
from kern_gen.llama.kv import KVLayout

ROOT = Path(__file__).resolve().parents[3]


def test_offsets_strides_and_total():
    kv = KVLayout(layers=3, kv_heads=2, max_len=8, head_dim=4)
    assert kv.block == 2 * 8 * 4 * 2 and kv.total_bytes == 6 * kv.block
    assert [kv.k(i) for i in range(3)] == [Ref(state=KV, offset=2 * i * kv.block)
                                           for i in range(3)]
    assert kv.v(2) == Ref(state=KV, offset=5 * kv.block)
    assert kv.v(2).offset + kv.block == kv.total_bytes
    assert kv.shape == [1, 2, 8, 4] and kv.strides == [64, 32, 4, 1]
    assert (kv.slot_stride, kv.head_stride) == (4, 32)


@pytest.mark.parametrize("name", [p for p in PRESETS
                                  if (ROOT / PRESETS[p][2] / "manifest.json").exists()])
def test_examples_use_the_layout(name):
    out = ROOT / PRESETS[name][2]
    m = json.loads((out / "manifest.json").read_text())
    kv = KVLayout.of(load(out / "config.json"), json.loads(
        (ROOT / PRESETS[name][0] / "provider-sidecar.json").read_text())["cache"]["max_len"])
    assert m["states"][KV]["bytes_fixed"] == kv.total_bytes
    step = m["kernels"]["prefill.attention"]["impl"]["steps"][0]
    assert step["args"][6:10] == [{"i64": kv.slot_stride}, {"i64": kv.head_stride}] * 2
    attn = next(d for d in m["programs"]["decode"]["dispatches"] if d["label"] == "L1.attn")
    assert attn["args"][1:3] == [{"state": KV, "offset": kv.k(1).offset},
                                 {"state": KV, "offset": kv.v(1).offset}]
