"""The generator's IR: the ops a wiring emits, the buffers they name, and the dataflow check.

A :class:`Program` is a list of :class:`Op` s in dispatch order plus the workspace
:class:`Buf` s they use.  Every kernel argument is a :class:`Ref`: a buffer (a workspace, a
weight named like the HF tensor, or one of the caller contract's buffers below) or a state
(by name: :data:`KV`), at a byte offset.  :func:`reads` / :func:`writes` say what an op
consumes and produces; :func:`check_dataflow` proves that every buffer an op reads was written
by an earlier op of the same program (so a dropped captured kernel had no other consumer).
:mod:`.assemble` turns ops into manifest dispatches, :mod:`.merge` rewrites them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kern_manifest import contract as C

from .errors import WiringError
from .facts import Site

TOK: dict[str, Any] = {"sym": C.SYMBOL}
"""The manifest expression of the dynamic row count (the contract's symbol ``tokens``)."""


def mul(e: Any, c: int) -> dict[str, Any]:
    """The manifest expression ``e * c``."""
    return {"mul": [e, c]}


KV = C.STATE
"""The one state of a Llama program: the KV cache, layout in :mod:`.kv`."""


@dataclass(frozen=True)
class Ref:
    """A kernel argument: buffer ``buf`` or state ``state`` (a state name), ``offset`` bytes in."""
    buf: str | None = None
    state: str | None = None
    offset: int = 0


# The caller contract's buffers (docs/caller-contract.md): the only names a program shares with
# its caller.  Inputs: token_ids i64 [tokens], positions i64 [tokens] (rope), slots i64
# [tokens] (the cache writers' index), pos0 i32 [1] (prefill attention), kv_lens i32 [tokens]
# and block_table i32 [tokens, P] (the paged attention); outputs: logits bf16 [1, vocab],
# next_token i64 [tokens], predictions i64 [tokens].
TOKEN_IDS = Ref(buf=C.TOKEN_IDS)
POSITIONS = Ref(buf=C.POSITIONS)
SLOTS = Ref(buf=C.SLOTS)
POS0 = Ref(buf=C.POS0)
KV_LENS = Ref(buf=C.KV_LENS)
BLOCK_TABLE = Ref(buf=C.BLOCK_TABLE)
LOGITS = Ref(buf=C.LOGITS)
NEXT_TOKEN = Ref(buf=C.NEXT_TOKEN)
PREDICTIONS = Ref(buf=C.PREDICTIONS)
INPUTS = (TOKEN_IDS, POSITIONS, SLOTS, POS0, KV_LENS, BLOCK_TABLE)
# DSpark (docs/dspark.md): the carry of projected tap features, bf16 [tokens, hidden], written
# by the tapped target programs and read by ``draft_precompute``; the draft's tokens, i64
# [tokens] (the ``draft`` program's output).
CARRY = Ref(buf="carry")
DRAFT_TOKENS = Ref(buf="draft_tokens")


def is_weight(buf: str | None) -> bool:
    """Weight buffers are named like the HF tensors (``model.…``) or, for a DSpark draft,
    ``draft.….weight`` (the ``draft`` program's workspaces are ``draft.<label>``, never ending
    in ``.weight``); the caller binds them."""
    return bool(buf) and (buf.startswith("model.") or
                          (buf.startswith("draft.") and buf.endswith(".weight")))


@dataclass
class Op:
    kind: str          # mined | gemm | gemm_acc | gemm_silu | gemm_split | gemm_norm
                       # | gemm_res | gemm_rnorm | gemm_rnorm_silu | embedding | angles
                       # | rope_kv | attention | rope_attention | argmax | markov
                       # | accept | norm_first | norm_add
    label: str
    site: Site | None = None
    ptrs: dict[int, tuple[str, Ref]] = field(default_factory=dict)   # mined: param -> (dir, ref)
    args: dict[str, Any] = field(default_factory=dict)               # others; outputs: c, out


@dataclass
class Buf:
    name: str
    dtype: str
    width: int
    cls: str
    shape: list | None = None       # a fixed shape instead of [program rows, width]


@dataclass
class Program:
    name: str
    rows: Any                       # 1 for decode, {"sym": "tokens"} for prefill and verify
    ops: list[Op]
    bufs: dict[str, Buf]


OUTPUT_ARGS = ("c", "out", "c0", "c1", "c2", "xo", "parts", "next_ids", "next_pos",
               "draft_lens", "verify_lens")
"""The argument names under which a non-mined op writes; every other :class:`Ref` it reads."""
INOUT_ARGS = ("acc", "kc", "vc", "res")
"""The argument names a non-mined op reads and writes in place (``gemm_acc``: C += A·Wᵀ;
``rope_kv``: rows of the K/V states; ``gemm_res``, ``norm_add``: the f32 residual stream)."""


def refs(o: Op) -> list[Ref]:
    """Every :class:`Ref` argument of ``o``, read or written."""
    return [r for _, r in o.ptrs.values()] + [v for v in o.args.values() if isinstance(v, Ref)]


def reads(o: Op) -> list[Ref]:
    """What ``o`` reads (weights and states included), in parameter order."""
    if o.kind == "mined":
        return [r for d, r in o.ptrs.values() if d in ("in", "inout")]
    return [v for key, v in o.args.items() if key not in OUTPUT_ARGS and isinstance(v, Ref)]


def writes(o: Op) -> list[tuple[str, Ref]]:
    """(direction, ref) of what ``o`` writes: ``out`` (new data) or ``inout`` (in place)."""
    if o.kind == "mined":
        return [(d, r) for d, r in o.ptrs.values() if d in ("out", "inout")]
    return [("out" if key in OUTPUT_ARGS else "inout", v) for key, v in o.args.items()
            if key in OUTPUT_ARGS + INOUT_ARGS and isinstance(v, Ref)]


def op_where(program: str, op: Op) -> str:
    """Where ``op`` of ``program`` is, for a diagnostic: its captured site, else its label."""
    return op.site.where(program, op.label) if op.site else f"{program}: {op.label}"


def used_buffers(ops: list[Op]) -> set[str]:
    """The names of every buffer the ops pass (states excluded)."""
    return {r.buf for o in ops for r in refs(o) if r.buf}


def check_dataflow(program: str, ops: list[Op]) -> None:
    """Every workspace a kept op reads was written by an earlier kept op (the dropped
    captured kernels must have had no other consumers).  The contract's inputs are written
    by the caller, weights are bound by it, states persist."""
    written = {r.buf for r in INPUTS} | {CARRY.buf}
    for o in ops:
        for r in reads(o):
            b = r.buf
            if b and b not in written and not is_weight(b):
                raise WiringError(f"{op_where(program, o)}: reads `{b}`, which no wired "
                                  f"kernel wrote before "
                                  f"(its captured producer was dropped or replaced elsewhere)")
        written.update(r.buf for _, r in writes(o) if r.buf)
