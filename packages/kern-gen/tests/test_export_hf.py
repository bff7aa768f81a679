"""Export from a tiny HF checkpoint the test writes: merged projections, tied lm_head, a
derived rope table, every dtype path; values checked exactly against independent math."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from kern_gen.cli import app

H, V, INTER, LAYERS = 8, 16, 12, 2
rng = np.random.default_rng(0)


def bf16_exact(shape) -> np.ndarray:
    """f32 values that are exactly representable in bf16 (low 16 bits zero)."""
    x = rng.standard_normal(shape).astype(np.float32)
    return (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def bits(x: np.ndarray) -> np.ndarray:
    """bf16 bit patterns of bf16-exact f32 values (independent of the exporter)."""
    return (x.view(np.uint32) >> np.uint32(16)).astype(np.uint16)


def f32_of_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


@pytest.fixture
def ckpt(tmp_path, write_st):
    """A two-file checkpoint (no index) + config.json; returns (dir, source values)."""
    d = tmp_path / "hf"
    d.mkdir()
    vals: dict[str, tuple[str, np.ndarray]] = {
        "model.embed_tokens.weight": ("F32", bf16_exact((V, H))),
        "model.norm.weight": ("F32", rng.standard_normal(H).astype(np.float16).astype(np.float32)),
    }
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        vals[p + "self_attn.q_proj.weight"] = ("F32", bf16_exact((H, H)))
        vals[p + "self_attn.k_proj.weight"] = ("F32", bf16_exact((4, H)))
        vals[p + "self_attn.v_proj.weight"] = ("BF16", bits(bf16_exact((4, H))))
        vals[p + "mlp.gate_proj.weight"] = ("BF16", bits(bf16_exact((INTER, H))))
        vals[p + "mlp.up_proj.weight"] = ("BF16", bits(bf16_exact((INTER, H))))
        vals[p + "mlp.down_proj.weight"] = ("BF16", bits(bf16_exact((H, INTER))))
        vals[p + "input_layernorm.weight"] = ("F16", rng.standard_normal(H).astype(np.float16))
    names = list(vals)
    write_st(d / "part-a.safetensors", {n: vals[n] for n in names[:7]})
    write_st(d / "part-b.safetensors", {n: vals[n] for n in names[7:]})
    (d / "config.json").write_text(json.dumps({"rope_theta": 10000.0, "tie_word_embeddings": True,
                                               "head_dim": 4}))
    return d, vals


PLAN = {
    "version": 1,
    "weights": {
        "model.layers.{n}.self_attn.qkv_proj.weight": {"concat": [
            "model.layers.{n}.self_attn.q_proj.weight", "model.layers.{n}.self_attn.k_proj.weight",
            "model.layers.{n}.self_attn.v_proj.weight"]},
        "model.layers.{n}.mlp.gate_up_proj.weight": {"concat": [
            "model.layers.{n}.mlp.gate_proj.weight", "model.layers.{n}.mlp.up_proj.weight"]},
        "rope.cos_sin": {"derived": "rope_cos_sin", "params": {"max_positions": 32}},
    },
}


def manifest_weights() -> dict[str, tuple[str, list]]:
    w = {"model.embed_tokens.weight": ("bf16", [V, H]), "lm_head.weight": ("bf16", [V, H]),
         "model.norm.weight": ("f16", [H])}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "self_attn.qkv_proj.weight"] = ("bf16", [H + 8, H])
        w[p + "mlp.gate_up_proj.weight"] = ("f32", [2 * INTER, H])
        w[p + "mlp.down_proj.weight"] = ("bf16", [H, INTER])
        w[p + "input_layernorm.weight"] = ("f32", [H])
    w["rope.cos_sin"] = ("f32", [32, 4])
    return w


def test_tiny_checkpoint_exact(tmp_path, ckpt, make_manifest, read_st):
    d, vals = ckpt
    m = make_manifest(tmp_path / "m.json", manifest_weights(),
                      {"x": {"dtype": "i32", "shape": ["tokens"], "class": "input"}})
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(PLAN))
    out = tmp_path / "w.safetensors"
    r = CliRunner().invoke(app, ["export", "--manifest", str(m), "--hf", str(d), "--out", str(out),
                                 "--plan", str(plan)])
    assert r.exit_code == 0, r.output
    assert "wrote 12 tensors" in r.output
    header, got, start = read_st(out)

    # file layout: manifest order, contiguous offsets, 8-aligned data, metadata
    assert start % 8 == 0
    names = [n for n in header if n != "__metadata__"]
    assert names == list(manifest_weights())
    off = 0
    for n in names:
        b, e = header[n]["data_offsets"]
        assert b == off
        off = e
    assert start + off == out.stat().st_size
    assert header["__metadata__"]["format"] == "pt"
    assert not list(tmp_path.glob("*.partial"))

    # dtypes and shapes exactly the manifest's
    st_name = {"bf16": "BF16", "f16": "F16", "f32": "F32"}
    for n, (dt, shape) in manifest_weights().items():
        assert got[n][0] == st_name[dt] and list(got[n][1].shape) == shape, n

    # values
    emb = vals["model.embed_tokens.weight"][1]
    assert np.array_equal(got["model.embed_tokens.weight"][1], bits(emb))
    assert np.array_equal(got["lm_head.weight"][1], bits(emb))  # tied
    assert np.array_equal(got["model.norm.weight"][1],
                          vals["model.norm.weight"][1].astype(np.float16))
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        qkv = got[p + "self_attn.qkv_proj.weight"][1]
        assert np.array_equal(qkv[:H], bits(vals[p + "self_attn.q_proj.weight"][1]))
        assert np.array_equal(qkv[H:H + 4], bits(vals[p + "self_attn.k_proj.weight"][1]))
        assert np.array_equal(qkv[H + 4:], vals[p + "self_attn.v_proj.weight"][1])
        gu = got[p + "mlp.gate_up_proj.weight"][1]
        assert np.array_equal(gu[:INTER], f32_of_bits(vals[p + "mlp.gate_proj.weight"][1]))
        assert np.array_equal(gu[INTER:], f32_of_bits(vals[p + "mlp.up_proj.weight"][1]))
        assert np.array_equal(got[p + "mlp.down_proj.weight"][1],
                              vals[p + "mlp.down_proj.weight"][1])
        assert np.array_equal(got[p + "input_layernorm.weight"][1],
                              vals[p + "input_layernorm.weight"][1].astype(np.float32))
    rope = got["rope.cos_sin"][1]
    want = np.array([[math.cos(p * 10000.0 ** (-2 * i / 4)) for i in range(2)]
                     + [math.sin(p * 10000.0 ** (-2 * i / 4)) for i in range(2)]
                     for p in range(32)], dtype=np.float32)
    np.testing.assert_allclose(rope, want, rtol=0, atol=2e-7)

    # the reference safetensors reader accepts the file
    from safetensors import safe_open

    with safe_open(str(out), framework="numpy") as f:
        assert set(f.keys()) == set(names)
        assert np.array_equal(f.get_tensor("model.norm.weight"), got["model.norm.weight"][1])


def test_default_plan_sharded_index(tmp_path, write_st, make_manifest, read_st):
    """Identity names through a sharded checkpoint with an index; bf16 -> bf16 is a copy."""
    d = tmp_path / "hf"
    d.mkdir()
    a = bits(bf16_exact((3, 5)))
    b = rng.standard_normal(7).astype(np.float32)
    write_st(d / "model-00001-of-00002.safetensors", {"a.weight": ("BF16", a)})
    write_st(d / "model-00002-of-00002.safetensors", {"b.weight": ("F32", b)})
    write_st(d / "stray.safetensors", {"c.weight": ("F32", b)})  # not in the index: ignored
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a.weight": "model-00001-of-00002.safetensors",
        "b.weight": "model-00002-of-00002.safetensors"}}))
    m = make_manifest(tmp_path / "m.json", {"b.weight": ("f32", [7]), "a.weight": ("bf16", [3, 5])})
    from kern_gen.export import HFSource, export, read_manifest

    src = HFSource(d)
    assert set(src.tensors()) == {"a.weight", "b.weight"}
    s = export(read_manifest(m), src, tmp_path / "o.safetensors")
    assert s.tensors == 2 and s.unused == []
    _, got, _ = read_st(tmp_path / "o.safetensors")
    assert np.array_equal(got["a.weight"][1], a) and np.array_equal(got["b.weight"][1], b)


def test_progress_callback(tmp_path, ckpt, make_manifest):
    from kern_gen.export import HFSource, Plan, export, read_manifest

    d, _ = ckpt
    m = make_manifest(tmp_path / "m.json", {"model.norm.weight": ("f32", [H]),
                                            "lm_head.weight": ("f32", [V, H])})
    seen = []
    s = export(read_manifest(m), HFSource(d), tmp_path / "o.safetensors", Plan(),
               progress=seen.append)
    assert [(p.index, p.count) for p in seen] == [(1, 2), (2, 2)]
    assert seen[-1].done == seen[-1].total == s.bytes == (H + V * H) * 4
    assert len(s.unused) == 7 * LAYERS  # everything but embed_tokens and norm
