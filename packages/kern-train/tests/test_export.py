"""draft.safetensors: the contract's names, shapes and order, bf16, fc split, no embedding or
lm_head, the size limit; read back into a draft it gives the same logits (bf16 rounding)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kern_weights import f32_to_bf16
from kern_weights.stfile import read_header

from ktrain_helpers import draft as make_draft
from kern_train.dspark.config import DSparkError, read_config, weight_shapes
from kern_train.dspark.export import draft_arrays, export, load_arrays


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_export_names_shapes_and_values(tmp_path, family):
    d = make_draft(family)
    size = export(tmp_path, d.g, d.cfg, draft_arrays(d))
    head = read_header(tmp_path / "draft.safetensors")
    want = weight_shapes(d.g, 2, 6)
    assert [(n, e.shape) for n, e in head.items()] == list(want.items())
    assert {e.dtype for e in head.values()} == {"BF16"}
    assert not any("embed" in n or "lm_head" in n for n in head)
    assert size == (tmp_path / "draft.safetensors").stat().st_size
    back = load_arrays(tmp_path / "draft.safetensors")
    fc = d.fc.weight.detach().numpy()
    for i in range(5):   # block i multiplies tap i: columns i·d … (i+1)·d of the [d, 5d] linear
        blk = fc[:, i * 32:(i + 1) * 32]
        assert np.array_equal(f32_to_bf16(back[f"draft.fc.{i}.weight"]), f32_to_bf16(blk))
    qkv = d.layers[1].self_attn.qkv_proj.weight.detach().numpy()
    assert np.array_equal(f32_to_bf16(back["draft.layers.1.self_attn.qkv_proj.weight"]),
                          f32_to_bf16(qkv))
    assert read_config(tmp_path / "dspark.json") == d.cfg


def test_read_back_gives_the_same_logits(tmp_path):
    from kern_train.dspark.model import Draft

    d = make_draft()
    export(tmp_path, d.g, d.cfg, draft_arrays(d))
    arrays = load_arrays(tmp_path / "draft.safetensors")
    e = Draft(d.g, d.cfg, d.embed, d.lm_head)
    state = {k[6:]: torch.from_numpy(v) for k, v in arrays.items() if ".fc." not in k}
    state["fc.weight"] = torch.from_numpy(np.concatenate(
        [arrays[f"draft.fc.{i}.weight"] for i in range(5)], 1))
    e.load_state_dict(state)
    gen = torch.Generator().manual_seed(0)
    taps = torch.randn(1, 20, 160, generator=gen)
    tok = torch.randint(0, 40, (1, 20), generator=gen)
    with torch.no_grad():
        a, b = d(taps, tok, torch.tensor([[3, 9]])), e(taps, tok, torch.tensor([[3, 9]]))
    assert not torch.equal(a, b)                       # bf16 rounding happened
    torch.testing.assert_close(a, b, atol=0.1, rtol=0.05)
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() > 0.9


def test_refusals(tmp_path):
    d = make_draft()
    arrays = draft_arrays(d)
    with pytest.raises(DSparkError, match="exceed the limit of 1000"):
        export(tmp_path, d.g, d.cfg, arrays, max_bytes=1000)
    bad = dict(arrays)
    bad["draft.norm.weight"] = np.ones(31, np.float32)
    with pytest.raises(DSparkError, match=r"`draft.norm.weight`: shape \[31\], the contract "
                                          r"says \[32\]"):
        export(tmp_path, d.g, d.cfg, bad)
    del bad["draft.norm.weight"]
    with pytest.raises(DSparkError, match="tensors missing"):
        export(tmp_path, d.g, d.cfg, bad)
    assert not (tmp_path / "draft.safetensors").exists()
