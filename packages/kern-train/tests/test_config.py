"""dspark.json, the tap rule, the target geometry and the contract's tensor list (no torch)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kern_train.dspark.config import (DraftConfig, DSparkError, read_config, read_geometry,
                                      tap_layers, weight_bytes, weight_shapes, write_config)

ROOT = Path(__file__).resolve().parents[3]
SMOL = ROOT / "examples/smollm2-135m/config.json"
QWEN = ROOT / "examples/qwen3-4b/config.json"


def test_tap_rule_values_of_the_contract():
    # docs/dspark.md states these two rows literally
    assert tap_layers(30) == (1, 7, 14, 20, 27)
    assert tap_layers(36) == (1, 9, 17, 25, 33)
    for L in range(8, 80):
        t = tap_layers(L)
        assert len(set(t)) == 5 and t == tuple(sorted(t)) and t[0] == 1 and t[-1] <= L - 1


@pytest.mark.parametrize("bad", [7, 0, -3, True, 30.0, "30"])
def test_tap_rule_refuses(bad):
    with pytest.raises(DSparkError, match="at least 8 layers"):
        tap_layers(bad)


def _cfg(**kw) -> DraftConfig:
    base = dict(target="HuggingFaceTB/SmolLM2-135M-Instruct", family="llama", target_layers=30,
                layers=2, tap_layers=tap_layers(30), markov_rank=64, mask_token_id=0, seed=3,
                trained={"steps": 5})
    return DraftConfig(**{**base, **kw})


def test_round_trip(tmp_path):
    p = tmp_path / "dspark.json"
    write_config(p, _cfg())
    doc = json.loads(p.read_text())
    assert list(doc) == ["format", "version", "target", "family", "target_layers", "layers",
                         "block", "tap_layers", "markov_rank", "mask_token_id", "seed", "trained"]
    assert doc["format"] == "kern-dspark" and doc["block"] == 7
    back = read_config(p)
    assert back == _cfg() and back.trained == {"steps": 5}


@pytest.mark.parametrize("key, value, message", [
    ("format", "other", "key `format`: expected 'kern-dspark', got 'other'"),
    ("version", 2, "key `version`: expected 1, got 2"),
    ("family", "gpt2", "key `family`: expected one of llama, qwen3, got 'gpt2'"),
    ("layers", 6, "key `layers`: expected an integer 1..5, got 6"),
    ("layers", "2", "key `layers`: expected an integer 1..5, got '2'"),
    ("block", 8, "key `block`: expected an integer 7..7, got 8"),
    ("tap_layers", [0, 8, 16, 24, 28], "key `tap_layers`: expected [1, 7, 14, 20, 27] (the rule "
                                       "for 30 target layers), got [0, 8, 16, 24, 28]"),
    ("markov_rank", 0, "key `markov_rank`: expected an integer ≥ 1, got 0"),
    ("trained", [1], "key `trained`: expected an object or null, got list"),
    ("extra", 1, "unknown key `extra`"),
])
def test_bad_config_names_file_and_key(tmp_path, key, value, message):
    p = tmp_path / "dspark.json"
    doc = _cfg().to_json()
    doc[key] = value
    p.write_text(json.dumps(doc))
    with pytest.raises(DSparkError) as e:
        read_config(p)
    assert str(e.value) == f"{p}: {message}"


def test_unreadable_config(tmp_path):
    with pytest.raises(DSparkError, match=r"missing\.json: cannot read"):
        read_config(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text("{")
    with pytest.raises(DSparkError, match=r"x\.json: not JSON"):
        read_config(tmp_path / "x.json")


def test_geometry_of_both_examples():
    s, q = read_geometry(SMOL), read_geometry(QWEN)
    assert (s.family, s.layers, s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate,
            s.vocab, s.rope_theta) == ("llama", 30, 576, 9, 3, 64, 1536, 49152, 100000.0)
    assert (q.family, q.layers, q.hidden, q.heads, q.kv_heads, q.head_dim) == \
        ("qwen3", 36, 2560, 32, 8, 128)


def test_geometry_refuses_other_models(tmp_path):
    doc = json.loads(SMOL.read_text())
    doc["model_type"] = "gpt2"
    p = tmp_path / "config.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(DSparkError, match=r"config\.json: key `model_type`: expected one of"):
        read_geometry(p)


def contract_list() -> dict[str, str]:
    """docs/dspark.md's tensor list: name pattern -> shape text, parsed from the page."""
    text = (ROOT / "docs/dspark.md").read_text()
    section = text[text.index("`draft.safetensors`"):text.index("`manifest.json`")]
    out = {}
    for line in section.splitlines():
        names = re.findall(r"`(draft\.[^`]+|….[^`]+)`", line)
        shape = re.search(r"`(\[[^`]+\])`", line)
        if names and shape:
            first = names[0]
            for n in names:
                out[first.rsplit(".", 2)[0] + n[1:] if n.startswith("…") else n] = shape.group(1)
    return out


def expand(pattern: str, shape: str, g, layers: int, r: int) -> dict[str, tuple[int, ...]]:
    env = {"d": g.hidden, "H": g.heads, "G": g.kv_heads, "D": g.head_dim, "I": g.intermediate,
           "V": g.vocab, "r": r}
    dims = tuple(eval(x.replace("·", "*"), {}, dict(env))
                 for x in shape.strip("[]").split(","))
    if "{i}" in pattern:
        return {pattern.replace("{i}", str(i)): dims for i in range(5)}
    if "{j}" in pattern:
        return {pattern.replace("{j}", str(j)): dims for j in range(layers)}
    return {pattern: dims}


@pytest.mark.parametrize("config", [SMOL, QWEN])
def test_weight_shapes_are_the_contract_list(config):
    g = read_geometry(config)
    want: dict[str, tuple[int, ...]] = {}
    for pattern, shape in contract_list().items():
        if "norm" in pattern and "self_attn" in pattern and g.family != "qwen3":
            continue  # q_norm / k_norm: "(Qwen3 only)"
        want |= expand(pattern, shape, g, 2, 64)
    assert len(want) == 5 + 1 + 2 * (6 + 2 * (g.family == "qwen3")) + 1 + 2
    assert weight_shapes(g, 2, 64) == want


def test_smollm2_two_layer_draft_fits_32_mb():
    g = read_geometry(SMOL)
    n = weight_bytes(g, 2, 64)
    per_layer = 2 * ((9 * 64 + 2 * 3 * 64) * 576 + 576 * 9 * 64 + 2 * 1536 * 576 + 576 * 1536
                     + 2 * 576)
    assert n == 2 * (5 * 576 * 576 + 576 + 576 + 2 * 49152 * 64) + 2 * per_layer
    assert n <= 32_000_000 < weight_bytes(g, 3, 64)
