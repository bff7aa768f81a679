"""The CLI: ``random`` for both example geometries' families, and one-line errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kern_train.cli import app
from kern_train.dspark.config import read_config, read_geometry, weight_shapes
from kern_train.dspark.export import load_arrays

ROOT = Path(__file__).resolve().parents[3]
SMOL = ROOT / "examples/smollm2-135m/config.json"


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_random_smollm2_draft(tmp_path):
    r = run("random", "--config", SMOL, "--out", tmp_path, "--target",
            "HuggingFaceTB/SmolLM2-135M-Instruct", "--seed", 7)
    assert r.exit_code == 0, r.output
    cfg = read_config(tmp_path / "dspark.json")
    assert cfg.tap_layers == (1, 7, 14, 20, 27) and cfg.trained is None and cfg.seed == 7
    a = load_arrays(tmp_path / "draft.safetensors")
    assert {k: v.shape for k, v in a.items()} == weight_shapes(read_geometry(SMOL), 2, 64)
    assert (tmp_path / "draft.safetensors").stat().st_size <= 32_000_000
    assert np.all(a["draft.norm.weight"] == 1)
    w = a["draft.layers.0.mlp.down_proj.weight"]
    assert 0.018 < w.std() < 0.022 and abs(w.mean()) < 1e-3
    again = run("random", "--config", SMOL, "--out", tmp_path / "again", "--seed", 7)
    assert again.exit_code == 0, again.output
    assert (tmp_path / "again/draft.safetensors").read_bytes() == \
        (tmp_path / "draft.safetensors").read_bytes()


def test_random_qwen3_family(tmp_path):
    doc = json.loads((ROOT / "examples/qwen3-4b/config.json").read_text())
    doc.update(hidden_size=64, intermediate_size=96, num_attention_heads=4,
               num_key_value_heads=2, head_dim=32, vocab_size=300)   # the shape, made small
    (tmp_path / "config.json").write_text(json.dumps(doc))
    r = run("random", "--config", tmp_path / "config.json", "--out", tmp_path / "d",
            "--layers", 1, "--markov-rank", 8)
    assert r.exit_code == 0, r.output
    a = load_arrays(tmp_path / "d/draft.safetensors")
    assert a["draft.layers.0.self_attn.q_norm.weight"].shape == (32,)
    assert a["draft.layers.0.self_attn.qkv_proj.weight"].shape == (4 * 32 + 2 * 2 * 32, 64)
    assert read_config(tmp_path / "d/dspark.json").tap_layers == (1, 9, 17, 25, 33)


@pytest.mark.parametrize("args, message", [
    (["random", "--config", "/nonexistent/config.json", "--out", "x"],
     "kern-train: /nonexistent/config.json: cannot read: No such file or directory"),
    (["random", "--config", SMOL, "--out", "x", "--layers", "6"],
     "kern-train: --layers: expected 1..5, got 6"),
    (["eval", "--target", "tiny", "--data", "d.npz", "--draft", "/nonexistent", "--device", "cpu"],
     "kern-train: /nonexistent/dspark.json: cannot read: No such file or directory"),
    (["data", "--target", "tiny", "--prompts", "/nonexistent.jsonl.gz", "--out", "x",
      "--device", "cpu"], "kern-train: /nonexistent.jsonl.gz: not a prompts file"),
    (["fit", "--target", "tiny", "--data", "d.npz", "--out", "x", "--device", "cpu",
      "--source-weight", "gsm8k"], "kern-train: --source-weight `gsm8k`: expected SOURCE=WEIGHT"),
    (["fit", "--target", "tiny", "--data", "d.npz", "--out", "x", "--device", "cpu",
      "--source-weight", "gsm8k=many"],
     "kern-train: --source-weight `gsm8k=many`: expected SOURCE=WEIGHT"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    r = run(*args)
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), r.output
