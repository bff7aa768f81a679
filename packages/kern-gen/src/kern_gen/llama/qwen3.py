"""Qwen3 = Llama + a per-head q/k RMSNorm before rope: its differences, as data.

Read by :mod:`.arch` (the ``qwen3`` row of ``ARCHS``).  Inductor fuses the q/k norm into the
q rope kernel and into the k rope + K-cache writer; in the decode (one-token) graph those are
the only differences.  In the prefill (dynamic) graph a variance kernel ``mean(x^2)`` per
(token, head) follows q_proj and k_proj, and the q rope is split into a ``sin`` half (writes
``rotate_half(norm(q)) * sin`` to a temporary) and a ``cos`` half (in place on q, adds the
sin half).  The roles' pointer layouts and literals differ accordingly; every kernel that
applies the norm carries ``rms_norm_eps`` as a compiled-in literal.
"""

from __future__ import annotations

from typing import Mapping

from .config import ModelConfig
from .ir import TOK, mul

# (role, substrings the kernel name has, substrings it lacks): matched after the externs and
# before the Llama roles (the norm-fused q rope names also match Llama's q rope rule).
RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("qk_var", ("mean_pow_view",), ("rsqrt",)),
    ("rope_sin", ("rsqrt", "sin"), ("cos", "flex_attention")),
    ("q_rope", ("rsqrt", "cos"), ("index_copy", "flex_attention")),
)

# Pointer parameters by (role, one-token graph), names as in ``arch.LLAMA_LAYOUT``.
LAYOUT: Mapping[tuple[str, bool], tuple[str, ...]] = {
    ("q_rope", True): ("out", "q", "norm_w", "angles"),
    ("q_rope", False): ("q_io", "norm_w", "var", "angles", "sin"),
    ("rope_sin", False): ("norm_w", "x", "var", "angles", "out"),
    ("qk_var", False): ("x", "var"),
    ("k_rope_cache", True): ("k", "norm_w", "angles", "slots", "cache"),
    ("k_rope_cache", False): ("slots", "norm_w", "k", "var", "angles", "sin", "v", "cache",
                              "vcache"),
}


def scalars(cfg: ModelConfig, role: str, decode: bool, which: str = "q") -> list:
    """The scalar literals (after Inductor's layout) each mined Qwen3 q/k kernel carries;
    ``which``: the variance kernel's input, ``q`` or ``k``."""
    H, KVH, D = cfg.heads, cfg.kv_heads, cfg.head_dim
    return {("q_rope", True): [H, D], ("q_rope", False): [TOK, mul(TOK, H), D],
            ("rope_sin", False): [TOK, D, mul(TOK, H)] if which == "q" else [TOK, D, TOK, KVH],
            ("qk_var", False): [mul(TOK, H if which == "q" else KVH), D],
            ("k_rope_cache", True): [KVH, D],
            ("k_rope_cache", False): [TOK, TOK, KVH, D]}[(role, decode)]


# Sites per layer, (one-token graph, dynamic graph), in addition to Llama's.
LAYER_SITES: Mapping[str, tuple[int, int]] = {"rope_sin": (0, 2), "qk_var": (0, 2)}

# The q/k kernels that apply the norm: their cubins carry the epsilon literal.
EPS_ROLES = frozenset({"q_rope", "rope_sin", "k_rope_cache"})

README_DECISIONS = (
    "- **Qwen3 q/k RMSNorm** (per head, before rope), mined: in decode it is fused into "
    "the q rope kernel (pointers: roped q out, q, `q_norm.weight`, angles; literals "
    "heads, head_dim) and the k rope + K-cache writer (k, `k_norm.weight`, angles, "
    "positions, cache; literals kv_heads, head_dim). In prefill a variance kernel "
    "(`mean(x^2)` per token and head, f32 `[tokens, heads]`) runs after each of q_proj "
    "and k_proj; the q rope is split into a `sin` half (`q_norm.weight`, q, variance, "
    "angles -> a `[tokens, heads*head_dim]` temporary) and a `cos` half that adds it and "
    "writes q **in place** (its first pointer is the q_proj output, which the attention "
    "then reads: q stays token-major); the k writer takes (`k_norm.weight`, k, variance, "
    "angles, positions, cache).",
    "- cuBLASLt split-K: the o_proj and down_proj GEMMs are split-K (`…_splitK_…`) "
    "followed by `splitKreduce_kernel`; asserted: each reduce directly follows its GEMM, "
    "reads the GEMM's workspace (struct bytes 688) and writes its C (328); both are "
    "replaced by the extern, and no kept kernel reads the workspace.",
)

README_FACTS = (
    "- every q/k norm kernel receives `model.layers.N.self_attn.q_norm.weight` / "
    "`k_norm.weight` of its layer (by pointer, against the sidecar); the variance and "
    "rope kernels read q/k at the q_proj/k_proj output (offset 0) and their literals "
    "equal heads, kv_heads and head_dim; the f32 bit pattern of `rms_norm_eps` occurs "
    "in every norm-applying cubin (RMSNorms, q/k rope kernels);",
)
