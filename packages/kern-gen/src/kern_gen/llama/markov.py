"""DSpark's Markov-head step as one own kernel (kernels/ABI.md 2a): ``next = argmax(logits +
W2 · W1[prev])`` over one row, the partial stage with the Markov term inside, then the plain
argmax reduce.  Replaces the step's four launches (the W1 gather, the cuBLASLt β = 1 GEMM, the
two argmax stages): the extern launch has no grid-dependency wait, so it broke the PDL chain
on both sides seven times a draft; the summed row is read by its argmax alone, so it is never
stored."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import WiringError
from .ir import Op

if TYPE_CHECKING:
    from .assemble import Assembler

MARKOV_PARTS = 512
"""Partial blocks (grid y) of the step: one pass over ``W2`` (vocab x rank bf16, 19 MB for
Qwen3-4B at rank 64) needs far more blocks than the plain argmax's 64 to stream at bandwidth;
the one-warp reduce loops over them."""
RANK_MAX = 256
"""The kernel's shared row of ``W1[prev]`` (``MARKOV_RANK_MAX`` in argmax.cu)."""
IFACE = ["in buffer<i64>", "in buffer<bf16>", "in buffer<bf16>", "in buffer<bf16>",
         "out buffer<i64>", "i32", "i32"]
"""``(prev, w1, w2, logits, next, vocab, rank)`` (ABI.md 2a)."""
PARTIAL = ["in buffer<i64>", "in buffer<bf16>", "in buffer<bf16>", "in buffer<bf16>",
           "out buffer<f32>", "out buffer<i32>", "i32", "i32"]


def markov(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    """Op args: ``prev`` (one i64), ``w1``, ``w2`` ([vocab, rank] weights), ``logits`` (one
    row), ``out`` (one i64), ``rank``."""
    a, P, V = op.args, MARKOV_PARTS, asm.cfg.vocab
    rank = a["rank"]
    if rank % 8 or not 8 <= rank <= RANK_MAX:
        raise WiringError(f"{program}: {op.label}: Markov rank {rank}; the own step kernel "
                          f"needs a multiple of 8 up to {RANK_MAX}")
    for key in ("w1", "w2"):
        if a[key].offset % 16:
            raise WiringError(f"{program}: {op.label}: `{a[key].buf}` at byte offset "
                              f"{a[key].offset}; the step kernel needs 16-byte alignment")
    body = {"params": IFACE, "impl": {
        "scratch": {"part_val": {"dtype": "f32", "shape": [1, P]},
                    "part_idx": {"dtype": "i32", "shape": [1, P]}},
        "steps": [
            asm.own_step("argmax.cubin", "kern_argmax_markov_bf16_partial", params=PARTIAL,
                         block=[256, 1, 1], grid=[1, P, 1],
                         args=[*({"arg": i} for i in range(4)), {"scratch": "part_val"},
                               {"scratch": "part_idx"}, {"arg": 5}, {"arg": 6}]),
            asm.own_step("argmax.cubin", "kern_argmax_bf16_reduce",
                         params=["in buffer<f32>", "in buffer<i32>", "out buffer<i64>",
                                 "i32"], block=[32, 1, 1], grid=[1, 1, 1],
                         args=[{"scratch": "part_val"}, {"scratch": "part_idx"}, {"arg": 4},
                               {"i32": P}])]}}
    name = asm.kernel(f"{program}.markov", body,
                      "own Markov-head step (W2 · W1[prev] added inside the argmax partial)")
    return {"label": op.label, "kernel": name,
            "args": [asm.arg(a["prev"]), asm.arg(a["w1"]), asm.arg(a["w2"]),
                     asm.arg(a["logits"]), asm.arg(a["out"]), {"i32": V}, {"i32": rank}]}
