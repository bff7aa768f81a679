"""The DSpark draft's manifest names (docs/dspark.md): weights, states, buffers.

Target weights ``model.layers.{j}.*`` of the captured wiring become the draft's
``draft.layers.{j}.*`` and the target's KV states ``kv.L{j}.*`` the draft's ``draft.kv.L{j}.*``
(the draft layers have the target's layer geometry, so the target's mined kernels run them).
"""

from __future__ import annotations

from ..llama.config import ModelConfig
from ..llama.ir import Ref
from ..llama.kv import KVLayout
from .spec import TAPS, DraftSpec

HIDDEN_NORM = "draft.hidden_norm.weight"
FINAL_NORM = "draft.norm.weight"
MARKOV_W1, MARKOV_W2 = "draft.markov_w1.weight", "draft.markov_w2.weight"


def fc(i: int) -> str:
    """Tap ``i``'s slice of the feature projection, ``[hidden, hidden]``."""
    return f"draft.fc.{i}.weight"


def weight(name: str, layers: int) -> str:
    """A target layer weight of layer j < ``layers`` -> the draft's; others unchanged."""
    for j in range(layers):
        pre = f"model.layers.{j}."
        if name.startswith(pre):
            return f"draft.layers.{j}." + name[len(pre):]
    return name


def state(name: str, layers: int) -> str:
    for j in range(layers):
        for w in ("k", "v"):
            if name == KVLayout.state(j, w):
                return f"draft.{name}"
    return name


def rename(ref: Ref, layers: int) -> Ref:
    if ref.state:
        return Ref(state=state(ref.state, layers), offset=ref.offset)
    if ref.buf:
        return Ref(buf=weight(ref.buf, layers), offset=ref.offset)
    return ref


def states(spec: DraftSpec, kv: KVLayout) -> dict[str, int]:
    """The draft KV: one state per draft layer's K and V, the target's bytes per token."""
    return {f"draft.{KVLayout.state(j, w)}": kv.bytes_per_token
            for j in range(spec.layers) for w in ("k", "v")}


def weights(spec: DraftSpec, cfg: ModelConfig) -> dict[str, list[int]]:
    """Every draft weight -> its bf16 shape (docs/dspark.md "Files"); the embedding and
    lm_head are the target's."""
    d, q, kv, inter = cfg.hidden, cfg.q_width, cfg.kv_width, cfg.intermediate
    out: dict[str, list[int]] = {fc(i): [d, d] for i in range(TAPS)}
    out[HIDDEN_NORM] = [d]
    for j in range(spec.layers):
        p = f"draft.layers.{j}."
        out[p + "input_layernorm.weight"] = [d]
        out[p + "self_attn.qkv_proj.weight"] = [q + 2 * kv, d]
        if cfg.model_type == "qwen3":
            out[p + "self_attn.q_norm.weight"] = [cfg.head_dim]
            out[p + "self_attn.k_norm.weight"] = [cfg.head_dim]
        out[p + "self_attn.o_proj.weight"] = [d, q]
        out[p + "post_attention_layernorm.weight"] = [d]
        out[p + "mlp.gate_up_proj.weight"] = [2 * inter, d]
        out[p + "mlp.down_proj.weight"] = [d, inter]
    out[FINAL_NORM] = [d]
    out[MARKOV_W1] = [cfg.vocab, spec.markov_rank]
    out[MARKOV_W2] = [cfg.vocab, spec.markov_rank]
    return out
