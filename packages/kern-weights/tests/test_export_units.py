"""Properties of the pieces: the q/k un-permutation, bf16 rounding, conversions, plans,
derived tensors, the writer."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kern_weights import Array, ExportError, Plan, SafetensorsWriter, Slot, convert, gguf_map
from kern_weights.derived import DERIVED
from kern_weights.arrays import bf16_to_f32, f32_to_bf16

# --- q/k permutation ---------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(heads=st.integers(1, 8), half=st.integers(1, 8), cols=st.integers(0, 5),
       seed=st.integers(0, 2**32 - 1))
def test_unpermute_inverts_permute(heads, half, cols, seed):
    rng = np.random.default_rng(seed)
    shape = (heads * 2 * half,) + ((cols,) if cols else ())
    w = rng.standard_normal(shape).astype(np.float32)
    assert np.array_equal(gguf_map.unpermute(gguf_map.permute(w, heads), heads), w)
    assert np.array_equal(gguf_map.permute(gguf_map.unpermute(w, heads), heads), w)


@pytest.mark.parametrize("heads,d", [(1, 2), (3, 64), (9, 64), (2, 6)])
def test_permutation_by_index(heads, d):
    """llama.cpp moves HF row (head h, half i, j) to GGUF row (head h, pair j, member i):
    HF rows j and j + d/2 (rotate_half partners) become adjacent rows 2j, 2j+1."""
    rows = heads * d
    hf = np.arange(rows)
    gg = gguf_map.permute(hf, heads)
    for h in range(heads):
        for i in range(2):
            for j in range(d // 2):
                assert gg[h * d + 2 * j + i] == hf[h * d + i * (d // 2) + j]
    assert np.array_equal(gguf_map.unpermute(gg, heads), hf)


def test_permute_rejects_bad_heads():
    with pytest.raises(ValueError):
        gguf_map.unpermute(np.zeros((10, 2)), 3)


def test_name_map():
    assert gguf_map.hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert gguf_map.hf_name("blk.12.attn_q.weight") == "model.layers.12.self_attn.q_proj.weight"
    assert gguf_map.hf_name("blk.0.ffn_norm.weight") == \
        "model.layers.0.post_attention_layernorm.weight"
    assert gguf_map.hf_name("blk.3.attn_k_norm.weight") == "model.layers.3.self_attn.k_norm.weight"
    assert gguf_map.hf_name("blk.3.attn_q.bias") == "model.layers.3.self_attn.q_proj.bias"
    assert gguf_map.hf_name("rope_freqs.weight") is None
    cfg = {"num_attention_heads": 9, "num_key_value_heads": 3}
    assert gguf_map.permuted_heads("blk.0.attn_q.weight", "llama", cfg) == 9
    assert gguf_map.permuted_heads("blk.0.attn_k.weight", "llama", cfg) == 3
    assert gguf_map.permuted_heads("blk.0.attn_v.weight", "llama", cfg) is None
    assert gguf_map.permuted_heads("blk.0.attn_q.weight", "qwen3", cfg) is None


# --- bf16 --------------------------------------------------------------------------------

def f32(bits: int) -> np.ndarray:
    return np.array([bits], dtype=np.uint32).view(np.float32)


@pytest.mark.parametrize("src,want", [
    (0x3F800000, 0x3F80),  # 1.0
    (0x3F808000, 0x3F80),  # tie, lower is even: down
    (0x3F818000, 0x3F82),  # tie, lower is odd: up
    (0x3F808001, 0x3F81),  # above the tie: up
    (0x3F807FFF, 0x3F80),  # below the tie: down
    (0x80000000, 0x8000),  # -0.0
    (0x00008000, 0x0000),  # subnormal tie to even
    (0x00018000, 0x0002),
    (0x7F800000, 0x7F80),  # inf
    (0xFF800000, 0xFF80),  # -inf
    (0x7F7FFFFF, 0x7F80),  # max f32 rounds to inf
    (0xBF7FFFFF, 0xBF80),  # carries into the exponent
])
def test_bf16_round_nearest_even(src, want):
    assert int(f32_to_bf16(f32(src))[0]) == want


def test_bf16_nan_stays_nan():
    for b in (0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x7FFFFFFF):
        assert math.isnan(float(bf16_to_f32(f32_to_bf16(f32(b)))[0]))


def _ref_bf16(x: float) -> int:
    """Nearest bf16 (ties to even) by exact float64 comparison of the two candidates."""
    u = int(np.array([x], np.float32).view(np.uint32)[0])
    lo = u >> 16
    a = float(bf16_to_f32(np.array([lo], np.uint16))[0])
    b = float(bf16_to_f32(np.array([(lo + 1) & 0xFFFF], np.uint16))[0])
    da, db = abs(x - a), abs(b - x)
    if da < db or (da == db and lo % 2 == 0):
        return lo
    return (lo + 1) & 0xFFFF


@settings(max_examples=300, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_bf16_matches_reference(x):
    if abs(x) >= 3.3895313892515355e38:  # rounds to inf: covered above
        return
    assert int(f32_to_bf16(np.array([x], np.float32))[0]) == _ref_bf16(x)


def test_conversions():
    x = np.array([1.0, -2.5, 65504.0, 1e-3], np.float32)
    assert convert(Array(x, "f32"), "f16", "t").dtype == np.float16
    assert np.array_equal(convert(Array(x, "f32"), "f16", "t"), x.astype(np.float16))
    b = convert(Array(x[[0, 1, 3]], "f32"), "bf16", "t")  # bf16(65504) = 65536: not an f16
    assert np.array_equal(convert(Array(b, "bf16"), "f32", "t"), bf16_to_f32(b))
    assert np.array_equal(convert(Array(b, "bf16"), "f16", "t"), bf16_to_f32(b).astype(np.float16))
    h = x.astype(np.float16)
    assert np.array_equal(convert(Array(h, "f16"), "bf16", "t"), f32_to_bf16(h.astype(np.float32)))
    d = np.array([0.1, 1 / 3], np.float64)
    assert np.array_equal(convert(Array(d, "f64"), "f32", "t"), d.astype(np.float32))
    i = np.arange(3, dtype=np.int32)
    assert np.array_equal(convert(Array(i, "i32"), "i32", "t"), i)


def test_conversion_errors():
    with pytest.raises(ExportError, match="65536.0 at flat index 0 overflows f16"):
        convert(Array(f32_to_bf16(np.array([65504.0], np.float32)), "bf16"), "f16", "w")
    with pytest.raises(ExportError, match=r"^w: value 70000\.0 at flat index 1 overflows f16$"):
        convert(Array(np.array([1, 70000], np.float32), "f32"), "f16", "w")
    with pytest.raises(ExportError, match="overflows bf16"):
        convert(Array(np.array([3.4e38], np.float32), "f32"), "bf16", "w")
    with pytest.raises(ExportError, match="cannot convert f32 to i32"):
        convert(Array(np.zeros(2, np.float32), "f32"), "i32", "w")
    with pytest.raises(ExportError, match="cannot convert i32 to f32"):
        convert(Array(np.zeros(2, np.int32), "i32"), "f32", "w")
    # infinities in the source are values, not overflow
    out = convert(Array(np.array([np.inf], np.float32), "f32"), "f16", "w")
    assert np.isinf(out[0])


def test_chunked_conversion_matches(monkeypatch):
    from kern_weights import arrays as dtypes

    x = np.random.default_rng(1).standard_normal((37, 11)).astype(np.float32)
    whole = convert(Array(x, "f32"), "bf16", "t")
    monkeypatch.setattr(dtypes, "CHUNK", 5)
    assert np.array_equal(convert(Array(x, "f32"), "bf16", "t"), whole)
    x[30, 3] = 1e6
    with pytest.raises(ExportError, match=f"flat index {30 * 11 + 3} overflows f16"):
        convert(Array(x, "f32"), "f16", "t")


# --- plans -------------------------------------------------------------------------------

def _plan(tmp_path, doc) -> Plan:
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return Plan.read(p)


def test_plan_rules(tmp_path):
    plan = _plan(tmp_path, {"weights": {
        "l.{i}.qkv": {"concat": ["l.{i}.q", "l.{i}.k", "l.{i}.v"]},
        "l.7.qkv": {"from": "special"},
        "x.{a}.{b}": {"from": "y.{b}.{a}"},
        "rope": {"derived": "rope_cos_sin", "params": {"theta": 1.0}},
    }})
    r = plan.rule("l.3.qkv", set(), {})
    assert (r.kind, r.sources) == ("concat", ("l.3.q", "l.3.k", "l.3.v"))
    assert plan.rule("l.7.qkv", set(), {}).sources == ("special",)  # exact key wins
    assert plan.rule("x.1.2", set(), {}).sources == ("y.2.1",)
    assert plan.rule("l.3.4.qkv", set(), {}).sources == ("l.3.4.qkv",)  # {i} is one segment
    r = plan.rule("rope", set(), {})
    assert (r.kind, r.derived, r.params) == ("derived", "rope_cos_sin", {"theta": 1.0})
    # defaults: identity; tied lm_head only when the source lacks it and ties are allowed
    d = Plan()
    assert d.rule("a.b", set(), {}).sources == ("a.b",)
    assert d.rule("lm_head.weight", set(), {}).sources == ("model.embed_tokens.weight",)
    assert d.rule("lm_head.weight", {"lm_head.weight"}, {}).sources == ("lm_head.weight",)
    assert d.rule("lm_head.weight", set(), {"tie_word_embeddings": False}).sources == \
        ("lm_head.weight",)


@pytest.mark.parametrize("doc,msg", [
    ("{", "malformed"),
    ({"weights": {"a": {}}}, "exactly one of `from`, `concat`, `derived`; found none"),
    ({"weights": {"a": {"from": "b", "concat": ["c"]}}}, "found `from`, `concat`"),
    ({"weights": {"a": {"from": "b", "params": {}}}}, "`params` is only allowed with `derived`"),
    ({"weights": {"a": {"concat": []}}}, "at least one"),
    ({"weights": {"a": {"form": "b"}}}, "unknown field `form`"),
    ({"weights": {"l.{i}": {"from": "m.{j}"}}},
     r"placeholder \{j\} in `m.\{j\}` is not in the key"),
    ({"version": 2}, "plan version 2 is not supported"),
])
def test_plan_errors(tmp_path, doc, msg):
    with pytest.raises(ExportError, match=msg) as e:
        _plan(tmp_path, doc)
    assert str(tmp_path / "plan.json") in str(e.value)


# --- derived -----------------------------------------------------------------------------

def test_rope_cos_sin_values():
    prep = DERIVED["rope_cos_sin"]
    a = prep({}, {"rope_theta": 500.0}, (5, 6), "w")()
    assert a.dtype == "f64" and a.shape == (5, 6)
    for p in range(5):
        for i in range(3):
            f = p * 500.0 ** (-2 * i / 6)
            assert a.data[p, i] == pytest.approx(math.cos(f), abs=1e-15)
            assert a.data[p, 3 + i] == pytest.approx(math.sin(f), abs=1e-15)
    b = prep({"theta": 500.0, "head_dim": 6, "max_positions": 5}, {}, (5, 6), "w")()
    assert np.array_equal(a.data, b.data)


@pytest.mark.parametrize("params,config,shape,msg", [
    ({}, {}, (4, 4), "parameter `theta` is needed"),
    ({"theta": -1}, {}, (4, 4), r"`theta` = -1 \(from the plan\) is not a positive number"),
    ({"theta": 10.0, "head_dim": 8}, {}, (4, 4), r"is \[4, 8\]; the manifest declares \[4, 4\]"),
    ({}, {"rope_theta": 10.0, "head_dim": 8}, (4, 4), "the manifest declares"),
    ({"theta": 10.0}, {}, (4, 3), "head_dim 3 is odd"),
    ({"theta": 10.0}, {}, (4,), "2-d"),
    ({"theta": 10.0, "scale": 2}, {}, (4, 4), "unknown rope_cos_sin parameter"),
    ({"theta": 10.0}, {"rope_scaling": {"type": "llama3"}}, (4, 4), "rope_scaling"),
    ({"theta": 10.0, "max_positions": 2.5}, {}, (4, 4), "not a positive integer"),
])
def test_rope_cos_sin_errors(params, config, shape, msg):
    with pytest.raises(ExportError, match=msg) as e:
        DERIVED["rope_cos_sin"](params, config, shape, "weight `rope`")
    assert str(e.value).startswith("weight `rope`: ")


# --- writer ------------------------------------------------------------------------------

def test_writer(tmp_path):
    slots = [Slot("a", "bf16", (2, 3)), Slot("b", "f32", ()), Slot("c", "u8", (0,))]
    out = tmp_path / "o.safetensors"
    with SafetensorsWriter(out, slots, {"k": "v"}) as w:
        assert w.total == 12 + 4
        w.write("a", np.arange(6, dtype=np.uint16).reshape(2, 3))
        w.write("b", np.array(1.5, np.float32))
        w.write("c", np.zeros(0, np.uint8))
    raw = out.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert (8 + n) % 8 == 0
    h = json.loads(raw[8:8 + n])
    assert h == {"__metadata__": {"k": "v"},
                 "a": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
                 "b": {"dtype": "F32", "shape": [], "data_offsets": [12, 16]},
                 "c": {"dtype": "U8", "shape": [0], "data_offsets": [16, 16]}}
    assert raw[8 + n:] == np.arange(6, dtype="<u2").tobytes() + struct.pack("<f", 1.5)
    from safetensors import safe_open

    with safe_open(str(out), framework="numpy") as f:
        assert set(f.keys()) == {"a", "b", "c"} and f.get_tensor("b") == np.float32(1.5)


def test_writer_refuses_and_cleans_up(tmp_path):
    out = tmp_path / "o.safetensors"
    slots = [Slot("a", "f32", (2,)), Slot("b", "f32", (2,))]
    with pytest.raises(ValueError, match="expected `a` next"):
        with SafetensorsWriter(out, slots) as w:
            w.write("b", np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="does not fill"):
        with SafetensorsWriter(out, slots) as w:
            w.write("a", np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="only 1 of 2"):
        with SafetensorsWriter(out, slots) as w:
            w.write("a", np.zeros(2, np.float32))
    assert list(tmp_path.iterdir()) == []
