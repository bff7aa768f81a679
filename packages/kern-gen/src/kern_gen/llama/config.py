"""The model config the generator wires for, and its check against the captured run.

Input: an HF ``config.json`` (or the same keys taken from GGUF metadata by transformers; the
provider sidecar's ``config`` holds exactly that for the captured run).  The captured Triton
kernels bake the shapes and the RMSNorm epsilon into their code, so the model being generated
for must equal the captured one on every field below: :func:`compare` refuses otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .errors import WiringError


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    rope_theta: float
    tie_embeddings: bool
    max_positions: int        # max_position_embeddings: the positions rope is defined for

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim


def from_hf(cfg: dict[str, Any], where: str) -> ModelConfig:
    """Read the fields from HF config keys; a missing key is an error naming ``where``."""
    def need(key: str) -> Any:
        if cfg.get(key) is None:
            raise WiringError(f"{where}: config key `{key}` is missing")
        return cfg[key]
    rope = cfg.get("rope_parameters") or {}
    theta = rope.get("rope_theta", cfg.get("rope_theta"))
    if theta is None:
        raise WiringError(f"{where}: no rope theta (`rope_parameters.rope_theta` or `rope_theta`)")
    if rope.get("rope_type", "default") != "default" or cfg.get("rope_scaling"):
        raise WiringError(f"{where}: only the default (unscaled) rope is wired; the config has "
                          f"{rope or cfg.get('rope_scaling')!r}")
    heads = int(need("num_attention_heads"))
    hidden = int(need("hidden_size"))
    return ModelConfig(
        model_type=str(need("model_type")), vocab=int(need("vocab_size")), hidden=hidden,
        intermediate=int(need("intermediate_size")), layers=int(need("num_hidden_layers")),
        heads=heads, kv_heads=int(need("num_key_value_heads")),
        head_dim=int(cfg.get("head_dim") or hidden // heads), eps=float(need("rms_norm_eps")),
        rope_theta=float(theta), tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_positions=int(need("max_position_embeddings")))


def load(path: Path) -> ModelConfig:
    return from_hf(json.loads(Path(path).read_text()), str(path))


def compare(model: ModelConfig, captured: ModelConfig, where: str) -> None:
    """The model must be the captured model's shape, epsilon and rope (they are baked into
    the mined cubins)."""
    diffs = [f"{f.name}: model {getattr(model, f.name)!r} vs captured "
             f"{getattr(captured, f.name)!r}"
             for f in fields(ModelConfig) if getattr(model, f.name) != getattr(captured, f.name)]
    if diffs:
        raise WiringError(f"{where}: the model config differs from the captured run's config "
                          f"(the mined kernels bake these in): " + "; ".join(diffs))
