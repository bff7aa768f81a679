"""``kern-gen export`` errors: one line each naming the place, exit 2, no traceback, and
no output file (nor a partial one) left behind."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from kern_gen.cli import app

PREFIX = "kern-gen export: error: "


@pytest.fixture
def env(tmp_path, write_st, make_manifest):
    d = tmp_path / "hf"
    d.mkdir()
    write_st(d / "model.safetensors", {
        "model.layers.0.self_attn.q_proj.weight": ("F32", np.ones((4, 2), np.float32)),
        "model.layers.0.self_attn.k_proj.weight": ("F32", np.ones((2, 2), np.float32)),
        "model.embed_tokens.weight": ("F32", np.ones((3, 2), np.float32)),
        "big": ("F32", np.array([1e6], np.float32)),
        "ids": ("I32", np.arange(3, dtype=np.int32)),
    })

    def run(weights, *extra, plan=None, hf=str(d)):
        m = (weights if isinstance(weights, str)
             else str(make_manifest(tmp_path / "m.json", weights)))
        args = ["export", "--manifest", m, "--out", str(tmp_path / "o.safetensors")]
        if hf is not None:
            args += ["--hf", hf]
        if plan is not None:
            p = tmp_path / "plan.json"
            p.write_text(plan if isinstance(plan, str) else json.dumps(plan))
            args += ["--plan", str(p)]
        r = CliRunner().invoke(app, args + list(extra))
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        return r, lines

    return tmp_path, d, run


def _failed(r, lines, tmp_path, n=1):
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert len(lines) == n and all(ln.startswith(PREFIX) for ln in lines), lines
    assert not (tmp_path / "o.safetensors").exists()
    assert not list(tmp_path.glob("*.partial"))
    return [ln[len(PREFIX):] for ln in lines]


def test_ok_and_unused_count(env):
    tmp, _, run = env
    r, lines = run({"model.embed_tokens.weight": ("bf16", [3, 2]), "ids": ("i32", [3])})
    assert r.exit_code == 0, r.output
    assert lines[-1].startswith("kern-gen export: wrote 2 tensors") and "3 source tensors unused" \
        in lines[-1]
    assert (tmp / "o.safetensors").exists()


def test_missing_tensor_names_closest(env):
    tmp, d, run = env
    msgs = _failed(*run({"model.layers.0.self_attn.q_proj.weights": ("f32", [4, 2]),
                         "model.layers.0.self_attn.v_proj.weight": ("f32", [2, 2])}), tmp, n=2)
    assert msgs[0] == ("weight `model.layers.0.self_attn.q_proj.weights` (default): source tensor "
                       f"`model.layers.0.self_attn.q_proj.weights` not found in HF checkpoint "
                       f"`{d}`; closest: `model.layers.0.self_attn.q_proj.weight`, "
                       "`model.layers.0.self_attn.k_proj.weight`")
    assert msgs[1].startswith("weight `model.layers.0.self_attn.v_proj.weight` (default): "
                              "source tensor `model.layers.0.self_attn.v_proj.weight` not found")


def test_shape_mismatch(env):
    tmp, _, run = env
    [m] = _failed(*run({"model.embed_tokens.weight": ("bf16", [2, 3])}), tmp)
    assert m == ("weight `model.embed_tokens.weight` (default): manifest declares bf16[2, 3], "
                 "source `model.embed_tokens.weight` [3, 2] does not give that shape")


def test_concat_mismatch(env):
    tmp, _, run = env
    plan = {"weights": {"qk": {"concat": ["model.layers.0.self_attn.q_proj.weight",
                                          "model.layers.0.self_attn.k_proj.weight"]}}}
    [m] = _failed(*run({"qk": ("f32", [7, 2])}, plan=plan), tmp)
    assert "manifest declares f32[7, 2], concatenation along dim 0 of " \
        "`model.layers.0.self_attn.q_proj.weight` [4, 2] + " in m
    assert m.startswith(f"weight `qk` (plan `{tmp / 'plan.json'}` entry `qk`): ")


def test_dtype_not_convertible(env):
    tmp, _, run = env
    [m] = _failed(*run({"model.embed_tokens.weight": ("i32", [3, 2])}), tmp)
    assert m == ("weight `model.embed_tokens.weight` (default): source "
                 "`model.embed_tokens.weight` is f32, which cannot be converted to the "
                 "manifest's i32")
    [m] = _failed(*run({"ids": ("f32", [3])}), tmp)
    assert "source `ids` is i32, which cannot be converted to the manifest's f32" in m


def test_overflow(env):
    tmp, _, run = env
    [m] = _failed(*run({"big": ("f16", [1])}), tmp)
    assert m == "weight `big`: value 1000000.0 at flat index 0 overflows f16"


def test_plan_cannot_produce(env):
    tmp, _, run = env
    [m] = _failed(*run({"r": ("f32", [4, 4])}, plan={"weights": {"r": {"derived": "alibi"}}}), tmp)
    assert m.startswith("weight `r` (plan `") and "unknown derived tensor `alibi` (known: " \
        "rope_cos_sin, rope_inv_freq)" in m
    [m] = _failed(*run({"r": ("f32", [4, 4])},
                       plan={"weights": {"r": {"derived": "rope_cos_sin"}}}), tmp)
    assert "parameter `theta` is needed" in m


def test_untied_lm_head(env, tmp_path):
    tmp, d, run = env
    (d / "config.json").write_text(json.dumps({"tie_word_embeddings": False}))
    [m] = _failed(*run({"lm_head.weight": ("f32", [3, 2])}), tmp)
    assert m.startswith("weight `lm_head.weight` (default): source tensor `lm_head.weight` "
                        "not found")
    (d / "config.json").write_text(json.dumps({}))
    r, _ = run({"lm_head.weight": ("f32", [3, 2])})
    assert r.exit_code == 0, r.output


def test_unreadable_inputs(env):
    tmp, d, run = env
    [m] = _failed(*run(str(tmp / "nope.json"), hf=str(d)), tmp)
    assert m.startswith(f"manifest: {tmp / 'nope.json'}: ") and "cannot read" in m
    bad = tmp / "bad.json"
    bad.write_text("{")
    [m] = _failed(*run(str(bad)), tmp)
    assert "malformed JSON" in m
    w = {"model.embed_tokens.weight": ("f32", [3, 2])}
    [m] = _failed(*run(w, hf=str(tmp / "none")), tmp)
    assert m == f"HF checkpoint `{tmp / 'none'}`: not a directory"
    empty = tmp / "empty"
    empty.mkdir()
    [m] = _failed(*run(w, hf=str(empty)), tmp)
    assert m == f"HF checkpoint `{empty}`: no *.safetensors files"
    junk = tmp / "junk"
    junk.mkdir()
    (junk / "x.safetensors").write_bytes(b"\xff" * 20)
    [m] = _failed(*run(w, hf=str(junk)), tmp)
    assert m.startswith(f"`{junk / 'x.safetensors'}`: header length")
    g = tmp / "x.gguf"
    g.write_bytes(b"not a gguf file at all")
    [m] = _failed(*run(w, "--gguf", str(g), hf=None), tmp)
    assert m.startswith(f"GGUF file `{g}`: not a readable GGUF file")
    [m] = _failed(*run(w, "--gguf", str(tmp / "no.gguf"), hf=None), tmp)
    assert m == f"GGUF file `{tmp / 'no.gguf'}`: no such file"
    [m] = _failed(*run(w, plan="[1"), tmp)
    assert m.startswith(f"plan `{tmp / 'plan.json'}`: ")


def test_source_choice(env):
    tmp, _, run = env
    w = {"model.embed_tokens.weight": ("f32", [3, 2])}
    [m] = _failed(*run(w, hf=None), tmp)
    assert m == "give exactly one source: --hf DIR or --gguf FILE"
    [m] = _failed(*run(w, "--gguf", "x.gguf"), tmp)
    assert m == "give exactly one source: --hf DIR or --gguf FILE"


def test_no_weights(env, make_manifest):
    tmp, _, run = env
    [m] = _failed(*run({}), tmp)
    assert m == "manifest declares no `weight` buffers; nothing to export"


def test_unwritable_output(env, tmp_path, make_manifest):
    _, d, _ = env
    m = make_manifest(tmp_path / "m2.json", {"model.embed_tokens.weight": ("f32", [3, 2])})
    r = CliRunner().invoke(app, ["export", "-m", str(m), "--hf", str(d),
                                 "-o", str(tmp_path / "no" / "dir" / "o.safetensors")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.output.startswith(PREFIX) and "cannot write" in r.output


def test_root_help_lists_export():
    r = CliRunner().invoke(app, ["--help"])
    assert r.exit_code == 0 and "export" in r.output
