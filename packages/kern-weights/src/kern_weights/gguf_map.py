"""GGUF -> Hugging Face: tensor names, llama.cpp's q/k row permutation, config keys.

**Names.** llama.cpp names tensors ``token_embd.weight``, ``blk.N.attn_q.weight``, ...;
:func:`hf_name` maps them to the ``transformers`` names of the Llama family (Llama, Qwen2/3,
Mistral share them). Tensors without a mapping keep their GGUF name.

**The permutation.** ``transformers`` applies rotary embeddings in *half* layout: within a
head of ``d`` rows, row ``i`` (``i < d/2``) is paired with row ``i + d/2``
(``rotate_half``). ggml's default ("normal") rope pairs *adjacent* rows ``2j, 2j + 1``.
llama.cpp's converter therefore reorders the rows of ``q_proj`` and ``k_proj`` of
``llama``-architecture models so that HF row ``(half, j)`` of each head lands at GGUF row
``(j, half)``: with rows viewed as ``[heads, 2, d/2]`` it swaps the last two axes
(``[heads, d/2, 2]``). :func:`unpermute` is the inverse: view the GGUF rows as
``[heads, d/2, 2]`` and swap back. It applies per head, so ``heads`` is the tensor's own
head count: ``head_count`` for q, ``head_count_kv`` for k. Architectures whose HF rope is
already "neox" style (Qwen2/3, ...) are converted without the reordering;
:data:`PERMUTED_ARCHS` lists the ones with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

#: GGUF ``general.architecture`` values whose q/k rows llama.cpp's converter reorders.
PERMUTED_ARCHS = frozenset({"llama"})

_GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}

_BLOCK = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}

_BLK = re.compile(r"blk\.(\d+)\.([a-z_]+)\.(weight|bias)")


def hf_name(gguf_name: str) -> str | None:
    """The HF name of a GGUF tensor, or ``None`` if it has no HF counterpart we know."""
    if gguf_name in _GLOBAL:
        return _GLOBAL[gguf_name]
    m = _BLK.fullmatch(gguf_name)
    if m and m.group(2) in _BLOCK:
        return f"model.layers.{m.group(1)}.{_BLOCK[m.group(2)]}.{m.group(3)}"
    return None


def permuted_heads(gguf_name: str, arch: str, config: Mapping[str, Any]) -> int | None:
    """The head count to un-permute ``gguf_name`` with, or ``None`` if it is not permuted."""
    if arch not in PERMUTED_ARCHS:
        return None
    m = _BLK.fullmatch(gguf_name)
    if not m:
        return None
    if m.group(2) == "attn_q":
        return int(config["num_attention_heads"])
    if m.group(2) == "attn_k":
        return int(config.get("num_key_value_heads", config["num_attention_heads"]))
    return None


def _check(rows: int, heads: int) -> None:
    if heads <= 0 or rows % (2 * heads):
        raise ValueError(f"{rows} rows do not split into {heads} heads of even size")


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """HF row order -> llama.cpp (GGUF) row order, along axis 0."""
    _check(w.shape[0], heads)
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(
        w.shape)


def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp (GGUF) row order -> HF row order, along axis 0 (inverse of :func:`permute`)."""
    _check(w.shape[0], heads)
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(
        w.shape)


#: GGUF metadata key (after ``{arch}.``) -> HF config key.
_CONFIG_KEYS = {
    "block_count": "num_hidden_layers",
    "context_length": "max_position_embeddings",
    "embedding_length": "hidden_size",
    "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.key_length": "head_dim",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "rope.freq_base": "rope_theta",
    "vocab_size": "vocab_size",
}


def hf_config(arch: str, meta: Mapping[str, Any], tensor_names: set[str]) -> dict[str, Any]:
    """An HF-style config from GGUF metadata (``meta``: key -> scalar value)."""
    cfg: dict[str, Any] = {"model_type": arch}
    for k, hk in _CONFIG_KEYS.items():
        v = meta.get(f"{arch}.{k}")
        if v is not None:
            cfg[hk] = v
    if "head_dim" not in cfg and "hidden_size" in cfg and "num_attention_heads" in cfg:
        cfg["head_dim"] = int(cfg["hidden_size"]) // int(cfg["num_attention_heads"])
    cfg.setdefault("num_key_value_heads", cfg.get("num_attention_heads"))
    cfg["tie_word_embeddings"] = "output.weight" not in tensor_names
    return cfg
