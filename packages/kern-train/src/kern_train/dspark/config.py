"""``dspark.json``, the tap-layer rule and the target geometry (docs/dspark.md); no torch.

- :func:`tap_layers` — the 5 target layers whose outputs (HF ``hidden_states[id + 1]``) feed the
  draft: ``1 + (i·(L − 4)) // 4``, i = 0..4.
- :class:`DraftConfig` — the content of ``dspark.json`` (the one place the taps live);
  :func:`read_config` / :func:`write_config` with one-line errors naming the file and key.
- :class:`Geometry` — the target's layer geometry, read from its HF ``config.json``
  (:func:`read_geometry`); the draft copies it.
- :func:`weight_shapes` — the contract's tensor names and shapes of ``draft.safetensors``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMAT = "kern-dspark"
VERSION = 1
BLOCK = 7
TAPS = 5
FAMILIES = ("llama", "qwen3")
#: HF ``model_type`` -> draft family (Qwen3: q/k RMSNorm per head).
MODEL_TYPES = {"llama": "llama", "qwen3": "qwen3"}


class DSparkError(ValueError):
    """Bad input to the trainer; the message is one line naming the file, key or argument."""


def tap_layers(num_layers: int) -> tuple[int, ...]:
    """The tap layer ids of a target with ``num_layers`` layers (SmolLM2, 30: 1, 7, 14, 20, 27;
    Qwen3-4B, 36: 1, 9, 17, 25, 33). Needs ``num_layers ≥ 8`` for 5 distinct taps."""
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 8:
        raise DSparkError(f"tap_layers: a target needs at least 8 layers for 5 distinct taps, "
                          f"got {num_layers!r}")
    return tuple(1 + (i * (num_layers - 4)) // 4 for i in range(TAPS))


@dataclass(frozen=True)
class DraftConfig:
    """``dspark.json``. ``trained`` is the provenance of trained weights, None for random."""

    target: str
    family: str
    target_layers: int
    layers: int
    tap_layers: tuple[int, ...]
    markov_rank: int
    mask_token_id: int
    seed: int
    block: int = BLOCK
    trained: dict[str, Any] | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["tap_layers"] = list(self.tap_layers)
        keys = ("target", "family", "target_layers", "layers", "block", "tap_layers",
                "markov_rank", "mask_token_id", "seed", "trained")
        return {"format": FORMAT, "version": VERSION, **{k: d[k] for k in keys}}


def _int(doc: dict, key: str, where: str, lo: int, hi: int | None = None) -> int:
    v = doc.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        rng = f"{lo}..{hi}" if hi is not None else f"≥ {lo}"
        raise DSparkError(f"{where}: key `{key}`: expected an integer {rng}, got {v!r}")
    return v


def parse_config(doc: Any, where: str) -> DraftConfig:
    """A :class:`DraftConfig` from the decoded JSON ``doc``; ``where`` names it in errors."""
    if not isinstance(doc, dict):
        raise DSparkError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        raise DSparkError(f"{where}: key `format`: expected {FORMAT!r}, got {doc.get('format')!r}")
    if doc.get("version") != VERSION:
        raise DSparkError(f"{where}: key `version`: expected {VERSION}, got {doc.get('version')!r}")
    unknown = sorted(set(doc) - set(DraftConfig.__dataclass_fields__) - {"format", "version"})
    if unknown:
        raise DSparkError(f"{where}: unknown key `{unknown[0]}`")
    if not isinstance(doc.get("target"), str) or not doc["target"]:
        raise DSparkError(f"{where}: key `target`: expected the target's model id, "
                          f"got {doc.get('target')!r}")
    if doc.get("family") not in FAMILIES:
        raise DSparkError(f"{where}: key `family`: expected one of {', '.join(FAMILIES)}, "
                          f"got {doc.get('family')!r}")
    L = _int(doc, "target_layers", where, 8)
    block = _int(doc, "block", where, BLOCK, BLOCK)
    taps = doc.get("tap_layers")
    if taps != list(tap_layers(L)):
        raise DSparkError(f"{where}: key `tap_layers`: expected {list(tap_layers(L))} "
                          f"(the rule for {L} target layers), got {taps!r}")
    trained = doc.get("trained")
    if trained is not None and not isinstance(trained, dict):
        raise DSparkError(f"{where}: key `trained`: expected an object or null, "
                          f"got {type(trained).__name__}")
    return DraftConfig(target=doc["target"], family=doc["family"], target_layers=L,
                       layers=_int(doc, "layers", where, 1, 5), block=block,
                       tap_layers=tuple(taps), markov_rank=_int(doc, "markov_rank", where, 1),
                       mask_token_id=_int(doc, "mask_token_id", where, 0),
                       seed=_int(doc, "seed", where, 0), trained=trained)


def _read_json(path: str | os.PathLike) -> tuple[Any, str]:
    """(the decoded document, its path for messages); one line on an unreadable file."""
    p = Path(path)
    try:
        return json.loads(p.read_text()), str(p)
    except OSError as e:
        raise DSparkError(f"{p}: cannot read: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise DSparkError(f"{p}: not JSON: {e.msg} at line {e.lineno}") from None


def read_config(path: str | os.PathLike) -> DraftConfig:
    return parse_config(*_read_json(path))


def write_config(path: str | os.PathLike, cfg: DraftConfig) -> None:
    Path(path).write_text(json.dumps(cfg.to_json(), indent=2) + "\n")


@dataclass(frozen=True)
class Geometry:
    """The target's layer geometry (the draft layers copy it), from its HF config."""

    family: str
    layers: int          # L, the target's
    hidden: int          # d
    heads: int           # H
    kv_heads: int        # G
    head_dim: int        # D
    intermediate: int    # I
    vocab: int           # V
    eps: float
    rope_theta: float


def geometry_from_hf(doc: Any, where: str) -> Geometry:
    """The :class:`Geometry` of an HF ``config.json`` document (Llama or Qwen3)."""
    if not isinstance(doc, dict):
        raise DSparkError(f"{where}: expected a JSON object")
    family = MODEL_TYPES.get(doc.get("model_type"))
    if family is None:
        raise DSparkError(f"{where}: key `model_type`: expected one of "
                          f"{', '.join(MODEL_TYPES)}, got {doc.get('model_type')!r}")
    n = {k: _int(doc, k, where, 1) for k in ("num_hidden_layers", "hidden_size",
                                            "num_attention_heads", "intermediate_size",
                                            "vocab_size")}
    kv = _int(doc, "num_key_value_heads", where, 1) if "num_key_value_heads" in doc \
        else n["num_attention_heads"]
    hd = _int(doc, "head_dim", where, 1) if doc.get("head_dim") is not None \
        else n["hidden_size"] // n["num_attention_heads"]
    if n["num_attention_heads"] % kv:
        raise DSparkError(f"{where}: key `num_key_value_heads`: {kv} does not divide "
                          f"num_attention_heads {n['num_attention_heads']}")
    rope = doc.get("rope_parameters") or {}
    theta = rope.get("rope_theta", doc.get("rope_theta"))
    if rope.get("rope_type", "default") != "default" or doc.get("rope_scaling"):
        raise DSparkError(f"{where}: key `rope_parameters`: only the default rope is supported")
    for key, v in (("rope_theta", theta), ("rms_norm_eps", doc.get("rms_norm_eps"))):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise DSparkError(f"{where}: key `{key}`: expected a positive number, got {v!r}")
    return Geometry(family=family, layers=n["num_hidden_layers"], hidden=n["hidden_size"],
                    heads=n["num_attention_heads"], kv_heads=kv, head_dim=hd,
                    intermediate=n["intermediate_size"], vocab=n["vocab_size"],
                    eps=float(doc["rms_norm_eps"]), rope_theta=float(theta))


def read_geometry(path: str | os.PathLike) -> Geometry:
    return geometry_from_hf(*_read_json(path))


def weight_shapes(g: Geometry, layers: int, markov_rank: int) -> dict[str, tuple[int, ...]]:
    """``draft.safetensors``' tensors in file order: name -> shape (docs/dspark.md, "Files")."""
    d, H, G, D, I = g.hidden, g.heads, g.kv_heads, g.head_dim, g.intermediate
    out: dict[str, tuple[int, ...]] = {f"draft.fc.{i}.weight": (d, d) for i in range(TAPS)}
    out["draft.hidden_norm.weight"] = (d,)
    for j in range(layers):
        p = f"draft.layers.{j}."
        out[p + "input_layernorm.weight"] = (d,)
        out[p + "self_attn.qkv_proj.weight"] = (H * D + 2 * G * D, d)
        if g.family == "qwen3":
            out[p + "self_attn.q_norm.weight"] = (D,)
            out[p + "self_attn.k_norm.weight"] = (D,)
        out[p + "self_attn.o_proj.weight"] = (d, H * D)
        out[p + "post_attention_layernorm.weight"] = (d,)
        out[p + "mlp.gate_up_proj.weight"] = (2 * I, d)
        out[p + "mlp.down_proj.weight"] = (d, I)
    out["draft.norm.weight"] = (d,)
    out["draft.markov_w1.weight"] = (g.vocab, markov_rank)
    out["draft.markov_w2.weight"] = (g.vocab, markov_rank)
    return out


def weight_bytes(g: Geometry, layers: int, markov_rank: int) -> int:
    """Size of ``draft.safetensors``' data in bf16 (the header adds a few KB)."""
    total = 0
    for shape in weight_shapes(g, layers, markov_rank).values():
        n = 1
        for s in shape:
            n *= s
        total += 2 * n
    return total
