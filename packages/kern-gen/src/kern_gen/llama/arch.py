"""Architecture facts: what the wiring knows of one model family, as one record per family.

:class:`Arch` holds everything that differs between Llama-family models: which captured
kernel plays which role (:class:`Rule` s over the kernel names Inductor derives from the fused
ops), the pointer layouts and scalar literals of the mined q/k kernels, how many sites of
each role a layer has, and the report's family-specific paragraphs.  The Llama base is
defined here; a family is a module beside :mod:`.qwen3` holding its differences as data, and
one row of :data:`ARCHS` (HF ``model_type`` -> :class:`Arch`) composing them.  The tests
(``tests/test_llama_generate.py``, ``tests/test_qwen3_generate.py``) run every row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from . import qwen3
from .config import ModelConfig
from .errors import WiringError
from .facts import Site
from .ir import TOK, mul


@dataclass(frozen=True)
class Rule:
    """A site plays ``role`` when its kernel name has every substring of ``has``, none of
    ``lacks``, starts with ``prefix``, has one of ``any_of`` (if given), and kern-mine's
    replay verdict is ``replay`` (if given)."""
    role: str
    has: tuple[str, ...] = ()
    lacks: tuple[str, ...] = ()
    prefix: str = ""
    any_of: tuple[str, ...] = ()
    replay: str | None = None

    def matches(self, site: Site) -> bool:
        n = site.name
        return (n.startswith(self.prefix) and all(h in n for h in self.has)
                and not any(x in n for x in self.lacks)
                and (not self.any_of or any(a in n for a in self.any_of))
                and (self.replay is None or site.info.replay == self.replay))


# The externs' sites, matched first in every family: nvjet GEMMs (replayed by kern-mine as
# "extra": cuBLASLt's own kernels) and cuBLASLt's split-K reduce.
EXTERN_RULES = (Rule("gemm", prefix="nvjet", replay="extra"),
                Rule("splitk_reduce", has=("cublasLt", "splitKreduce")))

# Kernels whose only consumers the wiring replaces (block masks, repeat_kv copies, flex
# partial/reduce kernels, cache-position bookkeeping): dropped.
DROP = ("flex_attention", "clone_expand_unsqueeze", "clone_expand_transpose_unsqueeze", "new_zeros", "_sort_", "sort_sum",
        "RangeFactories", "fused_add_arange_1", "add_arange_constant_pad", "add_copy_",
        "to_copy_unsqueeze", "bmm_expand_unsqueeze", "index_put", "slice_sum_transpose")

# The Llama roles after the externs, in match order (the first rule that matches wins).
LLAMA_RULES = (
    Rule("attn_transpose", has=("flex_attention", "_t_transpose"), prefix="triton_poi"),
    Rule("rope_angles", has=("cutlass", "sgemm")),
    Rule("argmax", has=("ArgMaxOps",)),
    Rule("embed", prefix="triton_poi_fused_embedding"),
    Rule("norm", has=("mean_mul_pow_rsqrt",), lacks=("cos",)),
    Rule("attn_transpose", has=("flex_attention_mm",)),
    Rule("silu", has=("mul_silu",)),
    Rule("k_rope_cache", has=("index_copy", "cos")),
    Rule("v_cache", has=("index_copy",)),
    Rule("q_rope", has=("cos", "sin"), lacks=("flex_attention",)),
    Rule("drop", any_of=DROP),
)

# Pointer parameters of the mined q/k kernels, in parameter order, by (role, one-token graph).
# Names: q/k/v = the projection output (read), q_io = q read and written in place, out = the
# roped q (or a sin half), angles = rope angles, norm_w = the q/k RMSNorm weight, var = the
# per-(token, head) f32 mean of squares, sin = the sin half of the q (k) rope, slots = the
# capture's per-token cache write index (bound to the i64 positions input), cache / vcache =
# this layer's K / V cache.  In the dynamic graph Inductor fuses the V write into the k rope
# + K writer (token-major caches: both stores share the slot arithmetic).
LLAMA_LAYOUT: Mapping[tuple[str, bool], tuple[str, ...]] = {
    ("q_rope", True): ("q", "angles", "out"),
    ("q_rope", False): ("q", "angles", "out"),
    ("k_rope_cache", True): ("slots", "k", "angles", "cache"),
    ("k_rope_cache", False): ("slots", "k", "angles", "v", "cache", "vcache"),
}


def llama_scalars(cfg: ModelConfig, role: str, decode: bool, which: str = "q") -> list:
    """The scalar literals (after Inductor's layout) each mined Llama q/k kernel carries."""
    return {("q_rope", True): [cfg.q_width], ("q_rope", False): [TOK, mul(TOK, cfg.q_width)],
            ("k_rope_cache", True): [cfg.kv_width],
            ("k_rope_cache", False): [TOK, TOK, cfg.kv_width]}[(role, decode)]


# Sites per layer of each per-layer role, (one-token graph, dynamic graph).
LLAMA_LAYER_SITES: Mapping[str, tuple[int, int]] = {
    "k_rope_cache": (1, 1), "v_cache": (1, 0), "q_rope": (1, 1), "silu": (1, 1)}

EMBED = "model.embed_tokens.weight"          # the embedding table (and the tied lm_head)
INV_FREQ = "model.rotary_emb.inv_freq"       # f32 [head_dim/2], derived by the export plan

# Each layer's GEMM weights, in the captured call order, and its RMSNorm weights.
LAYER_GEMMS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
               "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
LAYER_NORMS = ("input_layernorm", "post_attention_layernorm")


@dataclass(frozen=True)
class Arch:
    """What the wiring needs to know of one model family (HF ``model_type`` ``name``)."""
    name: str
    rules: tuple[Rule, ...]                                # site -> role, first match wins
    layout: Mapping[tuple[str, bool], tuple[str, ...]]    # (role, one-token) -> pointers
    scalars: Callable[..., list]                            # (cfg, role, one-token, q|k)
    layer_sites: Mapping[str, tuple[int, int]]             # role -> per layer (1-tok, dyn)
    eps_roles: frozenset[str] = frozenset()     # q/k kernels that apply an RMSNorm (eps)
    readme_decisions: tuple[str, ...] = ()      # report paragraphs: wiring decisions
    readme_facts: tuple[str, ...] = ()          # report paragraphs: facts asserted
    layer_gemms: tuple[str, ...] = field(default=LAYER_GEMMS)
    layer_norms: tuple[str, ...] = field(default=LAYER_NORMS)

    def role_of(self, site: Site) -> str:
        for r in self.rules:
            if r.matches(site):
                return r.role
        raise WiringError(f"site {site.index} `{site.name}` (group {site.group}): no role in "
                          f"the Llama wiring; the capture has a kernel the wiring does not know")

    def gemm_weights(self, cfg: ModelConfig, own_lm_head: bool) -> list[str]:
        """Every GEMM's weight in call order: the layers', then ``lm_head`` (tied: the
        embedding table, unless the model has an untied ``lm_head.weight``)."""
        names = [f"model.layers.{i}.{w}.weight" for i in range(cfg.layers)
                 for w in self.layer_gemms]
        names.append("lm_head.weight" if not cfg.tie_embeddings and own_lm_head
                     else EMBED)
        return names

    def norm_weights(self, cfg: ModelConfig) -> list[str]:
        """Every RMSNorm's weight in call order, ``model.norm`` last."""
        return [f"model.layers.{i}.{w}.weight" for i in range(cfg.layers)
                for w in self.layer_norms] + ["model.norm.weight"]

    def sites_per_layer(self, decode: bool) -> dict[str, int]:
        """Role -> sites per layer in the one-token (``decode``) or the dynamic graph."""
        return {r: n[0 if decode else 1] for r, n in self.layer_sites.items()}


LLAMA = Arch("llama", EXTERN_RULES + LLAMA_RULES, LLAMA_LAYOUT, llama_scalars,
             LLAMA_LAYER_SITES)

QWEN3 = Arch("qwen3", EXTERN_RULES + tuple(Rule(*r) for r in qwen3.RULES) + LLAMA_RULES,
             qwen3.LAYOUT, qwen3.scalars, {**LLAMA_LAYER_SITES, **qwen3.LAYER_SITES},
             eps_roles=qwen3.EPS_ROLES, readme_decisions=qwen3.README_DECISIONS,
             readme_facts=qwen3.README_FACTS)

ARCHS: dict[str, Arch] = {a.name: a for a in (LLAMA, QWEN3)}
"""HF ``model_type`` -> its architecture (Qwen3 = Llama + q_norm/k_norm before rope)."""
