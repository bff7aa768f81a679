"""The manifest's programs, each cut from one captured graph: :data:`PROGRAMS`.

A program is a function of the :class:`.wiring.Inputs`: it walks one captured group under a
:class:`.wiring.Cut` (which graph; where lm_head and the argmax write), keeps the ops it
needs and finishes the program (dataflow check, workspaces).  :func:`build` makes every
program in :data:`PROGRAMS` order, which is the manifest's, and merges its projections
(:mod:`.merge`).  A new program (``draft``, ...) is one function here and one row of
:data:`PROGRAMS`.  Rows of one call are one sequence (``prefill``, ``decode``, ``verify``) or
one token of each of B sequences (``batch``): only attention tells them apart, by the caller's
``kv_lens`` and ``block_table`` (docs/caller-contract.md).
"""

from __future__ import annotations

from typing import Callable

from . import merge as M
from .errors import WiringError
from .ir import LOGITS, NEXT_TOKEN, PREDICTIONS, Program
from .wiring import Cut, Inputs, Wiring, wire


def prefill(g: Inputs) -> Program:
    """Fills the KV state only: the dynamic graph's kernels through the last layer's V-cache
    write (what follows computes logits the caller does not read after a prompt chunk)."""
    w = wire(g, Cut("prefill", g.prefill_group))
    return w.finish(w.ops[:w.last_cache_write])


def decode(g: Inputs, name: str = "decode") -> Program:
    """One token: the one-token graph's whole forward, logits into the contract's
    ``logits`` and the greedy argmax into ``next_token`` (``name``: DSpark's
    ``decode_spec`` is this program plus taps)."""
    w = wire(g, Cut(name, g.decode_group, one_token=True, logits=LOGITS,
                    argmax_out=NEXT_TOKEN))
    return w.finish(_whole_forward(w))


def verify(g: Inputs) -> Program:
    """Speculative decoding's check of ``tokens`` = k + 1 rows: the dynamic graph's whole
    forward with logits for every row.  The captured prefill ``lm_head`` GEMM reads only the
    last row of the final norm's output (transformers' ``logits_to_keep=1``), which is
    asserted; ``verify`` multiplies the whole output instead (``m = tokens``) and writes the
    argmax of every row into ``predictions``."""
    w = wire(g, Cut("verify", g.prefill_group, every_row=True, argmax_out=PREDICTIONS))
    return w.finish(_whole_forward(w))


def batch(g: Inputs) -> Program:
    """B sequences in one step, one token each (``tokens`` = B rows): the dynamic graph's
    whole forward as in :func:`verify` (every kernel but attention is per row; the own
    attention reads each row's keys through its own table row and ``kv_lens``), the greedy
    token of every row into ``next_token``."""
    w = wire(g, Cut("batch", g.prefill_group, every_row=True, argmax_out=NEXT_TOKEN))
    return w.finish(_whole_forward(w))


def _whole_forward(w: Wiring) -> list:
    if not any(o.kind == "argmax" for o in w.ops):
        raise WiringError(f"{w.program} (group {w.group}): no argmax at the end of the forward")
    return w.ops


PROGRAMS: dict[str, Callable[[Inputs], Program]] = {
    "prefill": prefill, "decode": decode, "verify": verify, "batch": batch}
"""Program name -> the function that wires it, as captured (unmerged); manifest order."""

FEW_ROWS = frozenset({"decode", "verify", "decode_spec", "draft"})
"""The programs whose row count is small by construction: ``decode`` (1 row) and ``verify``
(``tokens`` = k + 1 rows, k <= 15 by the caller contract, usually a few) and DSpark's
``decode_spec`` (1 row) and ``draft`` (the block, <= 15 rows), where a GEMM streams
its weights; their GEMMs get the implementation chosen with ``--gemm`` (:mod:`.gemm`), while
``prefill`` and ``batch`` (up to ``tokens.max`` rows) keep cuBLASLt."""

GEMV_GEMMS = FEW_ROWS | {"draft_precompute"}
"""The programs whose plain GEMMs take the ``--gemm`` implementation: :data:`FEW_ROWS` and
DSpark's ``draft_precompute``, which runs once a round on the loop's hot path over the
round's verified rows (<= 16) and once per prompt chunk over up to ``tokens.max`` rows.  Its
K/V GEMMs through cuBLASLt took 6.2 µs each at one row on the H200 (10 of them, 62 of the
Qwen3 shape's 105 µs precompute, docs/measurements.md issue 15, session 17); the own GEMV
computes each row alone (the loop's precompute ahead of the predictions gives the draft the
same bits) and is correct at any row count, but re-reads W per 8 rows: a 2048-row prompt
chunk took 2951 µs on the Qwen3 shape (session 18), so the prompt's chunks run
``draft_precompute_prefill`` instead, the same program with prefill's cuBLASLt GEMMs (not in
this set).  Only the GEMMs: the fusions of :data:`FEW_ROWS` (q/k/v, SiLU·mul, rope) are not
applied to it."""


def build(g: Inputs) -> list[Program]:
    """Every program: wired as captured (every assertion runs on the captured GEMMs), then
    its projections merged (one GEMM per merged weight in the one-token program, weight
    views in the dynamic ones: :func:`.merge.merge_projections`)."""
    return [M.merge_projections(make(g), g.cfg) for make in PROGRAMS.values()]
