"""``kern-gen dspark``: the llama pipeline (:func:`kern_gen.llama.pipeline.generate`) with the
DSpark draft as its extension: the eight programs of :mod:`.programs`, the draft's weights and
KV states, and a report section."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..llama.config import ModelConfig
from ..llama.gemm import ACC_GEMV
from ..llama.ir import Program
from ..llama.kv import KVLayout
from ..llama.pipeline import Result, generate as generate_llama
from ..llama.wiring import Inputs
from . import names, programs, spec as S
from .spec import DraftSpec


@dataclass(frozen=True)
class DSpark:
    spec: DraftSpec

    def check(self, cfg: ModelConfig) -> None:
        S.check(self.spec, cfg)

    def programs(self, g: Inputs) -> list[Program]:
        return programs.build(g, self.spec)

    def weights(self, cfg: ModelConfig) -> dict[str, list[int]]:
        return names.weights(self.spec, cfg)

    def states(self, kv: KVLayout) -> dict[str, int]:
        return names.states(self.spec, kv)

    def readme(self, asm: Any, progs: list[Program]) -> str:
        return readme(self.spec, asm, progs)


def generate(capture: Path, config: Path | None, draft: Path, **kw: Any) -> Result:
    """The target manifest of ``capture`` with the draft ``draft`` (its dspark.json)."""
    return generate_llama(capture, config, extension=DSpark(S.load(draft)), **kw)


def readme(spec: DraftSpec, asm: Any, progs: list[Program]) -> str:
    n = {p.name: len(p.ops) for p in progs}
    taps = ", ".join(str(t) for t in spec.tap_layers)
    tap_gemms = {p.name: sum(o.label.startswith("tap") for o in p.ops) for p in progs}
    own = ACC_GEMV[asm.acc_impl]
    taps_how = ("the own accumulating GEMV `kern_gemv_acc_bf16` in " + ", ".join(
        f"`{p}`" for p in sorted(own & {"decode_spec", "verify"})) + ", cuBLASLt β = 1 "
        "elsewhere" if own else "cuBLASLt β = 1 GEMMs")
    lines = [
        "", "## DSpark draft (`kern-gen dspark`, docs/dspark.md)", "",
        f"- Draft: {spec.layers} layer(s) of the target's geometry, block {spec.block}, "
        f"Markov rank {spec.markov_rank}, taps after target layers {taps} "
        f"(from `{Path(spec.path).name}`).",
        "- Dispatches: " + ", ".join(f"`{k}` {v}" for k, v in n.items()) + ".",
        "- Tap GEMMs (into `carry`): " + ", ".join(f"`{k}` {v}" for k, v in
                                                    tap_gemms.items() if v) + ". Each tap "
        "is one GEMM per stored operand of the state after its layer (layer i + 1's fused "
        f"input norm: its in_out sum, else each summand; the projection is linear): {taps_how} "
        "(`--gemm-acc`).",
        "- The draft layers are the target's captured layer kernels on `draft.layers.{j}` "
        "weights and `draft.kv.L{j}` states; `draft` ends with the target's next input-norm "
        "kernel on `draft.norm.weight`, the shared lm_head on every row and the Markov head "
        f"unrolled {spec.block}x, each step one own kernel (`draft.markov`: the argmax of "
        "`logits[t] + markov_w2 · markov_w1[prev]`, ABI.md 2a); "
        "`draft_precompute` runs layer 0's plain RMSNorm kernel on `carry` "
        "(`draft.hidden_norm.weight`) and each draft layer's captured K/V path (its GEMMs "
        "through the `--gemm` implementation).",
        "- The non-causal block is the caller's `kv_lens` (p + block for every row): no own "
        "attention kernel for it.",
        "- `verify` ends with the in-graph acceptance step (`verify.accept`, own "
        "`kern_spec_accept`, ABI.md 6): the accepted prefix of its rows against its "
        "predictions, and the next round's inputs into the outputs `next.token_ids`, "
        "`next.positions`, `next.draft_kv_lens`, `next.verify_kv_lens` (mask token "
        f"{spec.mask_token_id}), which kern-run copies into the inputs on the device to queue "
        "a round before it has read the previous one (docs/dspark.md step 7).", ""]
    return "\n".join(lines)
