"""The taps: a target program also projects its residual stream after each tap layer into
``carry`` (docs/dspark.md: ``carry = Σ_i h^(i) · W_fc,iᵀ``).

Where the state after layer i lives: Inductor's fused RMSNorm kernels do not keep the
residual stream in one buffer (:mod:`kern_gen.llama.wiring`). Layer i + 1's
``input_layernorm`` kernel takes the running residual and the pending attention/MLP outputs
and normalises their sum; that sum *is* the hidden state after layer i. The kernel stores it
into its one ``in_out`` pointer when it has one (every few layers); otherwise the state is
the sum of its ``in`` activations, stored nowhere. The projection is linear, so each tap is
one GEMM per stored operand: the ``in_out`` buffer after the kernel ran (1 GEMM), else each
``in`` summand (2-4 GEMMs); the first GEMM of a program writes ``carry`` (β = 0), every other
accumulates (β = 1). The GEMMs run right after the norm kernel, before anything reuses those
addresses. Asserted: the norm site is layer i + 1's input norm (its weight, by
:func:`kern_gen.llama.roles.wire_norm`), it has at most one ``in_out`` activation and at least
one activation read; the dataflow check of the finished program holds.
"""

from __future__ import annotations

from dataclasses import replace

from ..llama.config import ModelConfig
from ..llama.errors import WiringError
from ..llama.ir import CARRY, Op, Program, Ref, check_dataflow, is_weight
from . import names
from .spec import DraftSpec


def summands(prog: Program, op: Op) -> list[Ref]:
    """The buffers whose sum, after ``op`` (a fused residual-add RMSNorm) ran, is the state it
    normalised: its ``in_out`` activation alone, else every ``in`` activation."""
    acts = [(d, r) for d, r in op.ptrs.values() if not is_weight(r.buf)]
    inout = [r for d, r in acts if d == "inout"]
    ins = [r for d, r in acts if d == "in"]
    where = f"{prog.name}: {op.label}"
    if len(inout) > 1:
        raise WiringError(f"{where}: {len(inout)} in_out activations; a fused residual norm "
                          f"stores its sum into one")
    if not inout and not ins:
        raise WiringError(f"{where}: reads no activation (no residual state to tap)")
    return inout or ins


def tap_norm(prog: Program, layer: int) -> int:
    """Index of the op normalising the state after ``layer``: layer + 1's input norm."""
    label = f"L{layer + 1}.input_layernorm"
    hit = [i for i, o in enumerate(prog.ops) if o.kind == "mined" and o.label == label]
    if len(hit) != 1:
        raise WiringError(f"{prog.name}: {len(hit)} ops `{label}` (the state after tap layer "
                          f"{layer}); expected one")
    return hit[0]


def add_taps(prog: Program, spec: DraftSpec, cfg: ModelConfig) -> Program:
    """``prog`` with the tap GEMMs into ``carry`` after each tap layer's state (rows: the
    program's)."""
    d = cfg.hidden
    at: dict[int, list[Op]] = {}
    first = True
    for i, layer in enumerate(spec.tap_layers):
        k = tap_norm(prog, layer)
        for s, ref in enumerate(summands(prog, prog.ops[k])):
            base = {"a": ref, "w": Ref(buf=names.fc(i)), "n": d, "k": d}
            label = f"tap{i}.L{layer}.{s}"
            op = (Op("gemm", label, None, args={**base, "c": CARRY}) if first else
                  Op("gemm_acc", label, None, args={**base, "acc": CARRY}))
            first = False
            at.setdefault(k, []).append(op)
    ops: list[Op] = []
    for k, o in enumerate(prog.ops):
        ops.append(o)
        ops.extend(at.get(k, []))
    check_dataflow(prog.name, ops)
    return replace(prog, ops=ops)
