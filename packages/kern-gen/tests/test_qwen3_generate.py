"""kern-gen qwen3 on the committed Qwen3-4B-shaped capture: the Qwen3-specific facts (per-head
q/k RMSNorm fused into the rope kernels, split-K reduces after o_proj/down_proj) are asserted
and, altered in a copy of the inputs, make the generator refuse naming the site and the fact.
(Byte-identical regeneration and clean verification of ``examples/qwen3-4b/`` run in
``test_llama_generate.py``, parametrized over both presets.)"""

from __future__ import annotations

import json
from pathlib import Path

import kern_manifest
import pytest
from kg_own import own_committed
from kern_mine import decode_json, encode_json, mine

from kern_weights.export_plan import Plan
from kern_gen.llama import WiringError, generate
from kern_gen.llama.command import PRESETS

ROOT = Path(__file__).resolve().parents[3]
CAP, CFG, OUT, LABEL = (ROOT / PRESETS["qwen3"][0], ROOT / PRESETS["qwen3"][1],
                        ROOT / PRESETS["qwen3"][2], PRESETS["qwen3"][3])


@pytest.fixture(scope="module")
def mined(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("mined") / "qwen3.json"
    p.write_bytes(encode_json(mine(CAP)))
    return p


def _gen(mined: Path, **kw):
    config = kw.pop("config", CFG)
    return generate(CAP, config, mined=mined, label=LABEL,
                    command="uv run --frozen kern-gen qwen3",
                    own_cubins=own_committed(OUT), **kw)


def _refuses(mined: Path, *needles: str, **kw) -> str:
    with pytest.raises(WiringError) as ei:
        _gen(mined, **kw)
    msg = str(ei.value)
    for n in needles:
        assert n in msg, f"{n!r} not in: {msg}"
    return msg


def _write(tmp: Path, obj: dict, name: str) -> Path:
    p = tmp / name
    p.write_text(json.dumps(obj))
    return p


def _sidecar() -> dict:
    return json.loads((CAP / "provider-sidecar.json").read_text())


def _mutate(mined: Path, tmp: Path, fn) -> Path:
    m = json.loads(mined.read_bytes())
    fn(m)
    decode_json(json.dumps(m))
    return _write(tmp, m, "mined.json")


def _decode_group(m: dict) -> dict:
    return next(g for g in m["groups"] if g["reference"]["site"] is None)


def _prefill_group(m: dict) -> dict:
    return max((g for g in m["groups"] if g["reference"]["site"] is not None),
               key=lambda g: len(set(g["tokens"])))


def test_qwen3_wiring_binds_the_q_k_norm_weights():
    m = kern_manifest.read(OUT / "manifest.json")
    for prog in ("prefill", "decode", "verify"):
        d = m.programs[prog].dispatches
        for layer in (0, 17, 34):
            if prog == "prefill":
                q = next(x for x in d if x.label == f"L{layer}.q_rope")
                k = next(x for x in d if x.label == f"L{layer}.k_rope_cache")
            else:           # the few-row programs' fused rope (kern_gen.llama.fuse_rope),
                # in decode folded into the attention (kern_gen.llama.fuse_rope_attention)
                q = k = next(x for x in d if x.label == (f"L{layer}.attn.rope" if prog ==
                                                         "decode" else f"L{layer}.rope_kv"))
            assert f"model.layers.{layer}.self_attn.q_norm.weight" in repr(q.args)
            assert f"model.layers.{layer}.self_attn.k_norm.weight" in repr(k.args)
    labels = [x.label for x in m.programs["prefill"].dispatches]
    # the token-major capture fuses the V write into the k rope's cos half + K writer
    assert labels[:12] == ["embed", "L0.input_layernorm", "L0.self_attn.q_proj", "L0.q_var",
                           "rope angles", "L0.q_rope_sin", "L0.self_attn.k_proj", "L0.k_var",
                           "L0.k_rope_sin", "L0.self_attn.v_proj", "L0.k_rope_cache",
                           "L0.q_rope"]
    assert not any("splitK" in repr(k) for k in m.kernels.values())


def test_export_plan_covers_hf_qwen3_names():
    """Every weight buffer of the manifest comes from the HF Qwen3 checkpoint tensor of the
    same name (q_norm/k_norm included; tied lm_head absent), is a merged projection
    (``qkv_proj`` = q, k, v rows; ``gate_up_proj`` = gate, up rows: the plan's ``concat``)
    or is the derived inv_freq; every HF tensor is used."""
    cfg = json.loads(CFG.read_text())
    hf = {"model.embed_tokens.weight", "model.norm.weight"}
    merged = {}
    for i in range(cfg["num_hidden_layers"]):
        hf |= {f"model.layers.{i}.{n}.weight" for n in (
            "input_layernorm", "post_attention_layernorm", "self_attn.q_proj",
            "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm",
            "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}
        p = f"model.layers.{i}."
        merged[p + "self_attn.qkv_proj.weight"] = tuple(
            f"{p}self_attn.{x}_proj.weight" for x in "qkv")
        merged[p + "mlp.gate_up_proj.weight"] = (p + "mlp.gate_proj.weight",
                                                 p + "mlp.up_proj.weight")
    plan = Plan.read(OUT / "export-plan.json")
    weights = {n for n, b in json.loads((OUT / "manifest.json").read_text())["buffers"].items()
               if b["class"] == "weight"}
    parts = {x for ps in merged.values() for x in ps}
    assert weights - {"model.rotary_emb.inv_freq"} == (hf - parts) | set(merged)
    for n in sorted(weights):
        r = plan.rule(n, hf, cfg)
        if n == "model.rotary_emb.inv_freq":
            assert r.kind == "derived" and r.derived == "rope_inv_freq"
        elif n in merged:
            assert r.kind == "concat" and r.sources == merged[n], (n, r)
        else:
            assert r.kind == "from" and r.sources == (n,), (n, r)


def test_refuses_moved_q_norm_weight(mined, tmp_path):
    sc = _sidecar()
    w = next(t for t in sc["weights"] if t["name"] == "model.layers.5.self_attn.q_norm.weight")
    w["data_ptr"] += 256
    msg = _refuses(mined, "model.layers.5.self_attn.q_norm.weight", "site", "rope_sin (q)",
                   sidecar=_write(tmp_path, sc, "sidecar.json"))
    assert "prefill" in msg, msg


def test_refuses_moved_k_norm_weight(mined, tmp_path):
    sc = _sidecar()
    w = next(t for t in sc["weights"] if t["name"] == "model.layers.9.self_attn.k_norm.weight")
    w["data_ptr"] += 256
    _refuses(mined, "model.layers.9.self_attn.k_norm.weight", "rope_sin (k)", "sin",
             sidecar=_write(tmp_path, sc, "sidecar.json"))


def test_refuses_other_epsilon_in_config(mined, tmp_path):
    c = json.loads(CFG.read_text())
    c["rms_norm_eps"] = 1e-5
    _refuses(mined, "eps", "1e-05", config=_write(tmp_path, c, "config.json"))


def test_refuses_epsilon_not_in_the_cubins(mined, tmp_path):
    """Config and sidecar both claim 1e-5: the captured kernels' compiled-in literal (1e-6)
    still refutes it, at the first norm-applying site."""
    c = json.loads(CFG.read_text())
    c["rms_norm_eps"] = 1e-5
    sc = _sidecar()
    sc["config"]["rms_norm_eps"] = 1e-5
    _refuses(mined, "f32 literal 1e-05", "rsqrt", "site",
             config=_write(tmp_path, c, "config.json"),
             sidecar=_write(tmp_path, sc, "sidecar.json"))


def test_refuses_other_head_dim_literal(mined, tmp_path):
    """The decode q norm+rope kernel of layer 3 carries head_dim 128; claim 64."""
    def alter(m):
        sites = [s for s in _decode_group(m)["sites"]
                 if "rsqrt" in s["kernel"] and "cos" in s["kernel"]
                 and "index_copy" not in s["kernel"] and "flex" not in s["kernel"]]
        f = next(f for f in sites[3]["fits"] if f["what"] == "param[5]")
        assert f["expr"] == 128
        f["expr"], f["text"] = 64, "64"
    msg = _refuses(_mutate(mined, tmp_path, alter), "decode", "q_rope, layer 3", "64", "128")
    assert "scalar literals" in msg


def test_refuses_q_view_offset(mined, tmp_path):
    """The prefill q variance kernel of layer 2 reading q 256 bytes into the q_proj output."""
    def alter(m):
        sites = [s for s in _prefill_group(m)["sites"] if "mean_pow_view" in s["kernel"]]
        ptr = next(p for p in sites[4]["pointers"] if p["param"] == 0)
        ptr["offset"] += 256
    _refuses(_mutate(mined, tmp_path, alter), "prefill", "q variance reads q")


def test_refuses_split_k_reduce_of_another_buffer(mined, tmp_path):
    """A split-K reduce writing elsewhere than its GEMM's C."""
    def alter(m):
        sites = [s for s in _decode_group(m)["sites"] if "splitKreduce" in s["kernel"]]
        ptr = next(p for p in sites[7]["pointers"] if p["param"] == 2)
        ptr["offset"] += 512
    _refuses(_mutate(mined, tmp_path, alter), "decode", "splitKreduce",
             "split-K reduce param 2")
