"""The own kernels' dispatches (``packages/kern-gen/kernels/``, ABI in ``kernels/ABI.md``).

One emitter per own op kind (the Assembler's ``EMIT`` table): embedding gather, attention
(split-KV decode, flash prefill) and the two-stage greedy argmax; the rope kernels' are in
:mod:`.own_rope`.  Each declares
its manifest kernel (interface, impl steps through :meth:`.assemble.Assembler.own_step`,
scratch) once per distinct body and returns the dispatch: ``{"label", "kernel", "args"}``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .arch import EMBED
from . import attn_cluster as AC
from .attn_cluster import DECODE_IFACE
from .errors import WiringError
from .ir import BLOCK_TABLE, KV_LENS, POS0, TOK, TOKEN_IDS, Op, Ref

if TYPE_CHECKING:
    from .assemble import Assembler

ARGMAX_PARTS = 64
SPLIT_GROWTH = 4
"""The decode attention's grid holds ``SPLIT_GROWTH x decode_splits`` splits; a row uses more
than the minimum from ``512 x decode_splits`` keys on (kernels/ABI.md 3a)."""


def embedding(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    """The gather ``out[t] = table[ids[t]]``: by default the token embedding of every row;
    an op may name another ``table`` of ``width`` columns (rows of ``vocab``), its ``ids`` and
    its ``rows`` (DSpark's Markov head gathers one row of ``markov_w1``)."""
    cfg, a = asm.cfg, op.args
    rows = a.get("rows", rows)
    p = ["in buffer<i64>", "in buffer<bf16>", "out buffer<bf16>"]
    step = asm.own_step("embedding.cubin", "kern_embedding_bf16",
                        params=[*p, "i32", "i32"], block=[256, 1, 1], grid=[rows, 1, 1],
                        args=[{"arg": 0}, {"arg": 1}, {"arg": 2},
                              {"i32": a.get("width", cfg.hidden)}, {"i32": cfg.vocab}])
    name = asm.kernel(f"{program}.embedding", {"params": p, "impl": {"steps": [step]}},
                      "own `kern_embedding_bf16`")
    return {"label": op.label, "kernel": name,
            "args": [asm.arg(a.get("ids", TOKEN_IDS)), asm.arg(a.get("table", Ref(buf=EMBED))),
                     asm.arg(a["out"])]}


def attention(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    """Both read keys through the caller's page table (``block_table``, ABI.md 3).
    ``prefill``: the own flash kernel (query tiles of 64 rows of one sequence, causal from
    ``pos0``, table row 0).  Every other program (``decode``, ``verify``, ``batch``): the own
    split-KV kernel, one grid z-slice per query row, row t seeing its ``kv_lens[t]`` keys
    through table row t: rows may be one sequence's (verify: k + 1 <= 16) or B sequences'
    (batch); a 64-row query tile would idle on so few rows per sequence, a split over the
    keys keeps the SMs busy."""
    D = asm.cfg.head_dim
    if D not in (64, 128):
        raise WiringError(f"own attention has head_dim 64 or 128; the model has {D}")
    strides = AC.kv_strides(asm)
    a = op.args
    qkv = [asm.arg(a["q"]), asm.arg(a["k"]), asm.arg(a["v"])]
    if program == "prefill":
        return {"label": op.label, "kernel": _flash(asm, strides),
                "args": [*qkv, asm.arg(POS0), asm.arg(BLOCK_TABLE), asm.arg(a["out"]),
                         {"sym": "tokens"}]}
    decode = DECODE_ATTENTION.get(asm.attention)
    if decode is None:
        raise WiringError(f"--attention `{asm.attention}`: choose one of "
                          f"{', '.join(DECODE_ATTENTION)}")
    n = per_row_splits(asm, program, rows)
    extra = [{"expr": {"mul": [TOK, n]}}] if n else []
    if rows_attention(asm, program, rows):
        decode, extra = _rows_two, [*extra, {"sym": "tokens"}]
    return {"label": op.label, "kernel": decode(asm, program, rows, strides),
            "args": [*qkv, asm.arg(KV_LENS), asm.arg(BLOCK_TABLE), asm.arg(a["out"]), *extra]}


def _decode_geometry(asm: Assembler, rows: Any) -> tuple[int, int, int, int, int, Any]:
    """(D, query heads, kv heads, s_min, S, scratch rows): S = SPLIT_GROWTH·s_min is the most
    splits a long row uses (ABI.md 3a)."""
    cfg = asm.cfg
    s_min = decode_splits(cfg.kv_heads)
    return (cfg.head_dim, cfg.heads, cfg.kv_heads, s_min, SPLIT_GROWTH * s_min,
            "tokens" if rows == TOK else rows)


def _iface(asm: Assembler, program: str, rows: Any) -> list[str]:
    """:data:`DECODE_IFACE`, plus the ``s_min`` i32 where :func:`per_row_splits`."""
    return [*DECODE_IFACE, "i32"] if per_row_splits(asm, program, rows) else DECODE_IFACE


def _partials(r: Any, H: int, S: int, D: int) -> dict[str, Any]:
    """The split partials' scratch, f32: (m, l) and the unnormalised accumulator."""
    return {"part_ml": {"dtype": "f32", "shape": [r, H, S, 2]},
            "part_acc": {"dtype": "f32", "shape": [r, H, S, D]}}


PREFILL_SMEM = {64: 40960, 128: 81920}
"""Dynamic shared memory of attn_prefill.cubin's kernels (bytes): a 64-row Q tile and two
64-key K and V buffers (ABI.md 3b, 3b′)."""


def _reduce_step(asm: Assembler, D: int, H: int, S: int, rows: Any,
                 s_arg: dict[str, Any]) -> dict[str, Any]:
    """Step 2 of a split-KV attention: one block per (query head, row) merges the row's
    splits from ``part_ml`` / ``part_acc`` into ``out`` (the interface's 6th parameter)."""
    return asm.own_step("attn_decode_split.cubin", f"kern_attn_decode_reduce_bf16_d{D}",
                        params=["in buffer<f32>", "in buffer<f32>", "in buffer<i32>",
                                "out buffer<bf16>", "i32", "i32", "i32"],
                        block=[D, 1, 1], grid=[H, rows, 1],
                        args=[{"scratch": "part_ml"}, {"scratch": "part_acc"}, {"arg": 3},
                              {"arg": 5}, {"i32": H}, {"i32": S}, s_arg])


def _split_kv_two(asm: Assembler, program: str, rows: Any, strides: list) -> str:
    """Two launches (kernels/ABI.md 3a, ``attn_decode_split.cubin``): split partials into
    scratch, then one block per (query head, row) merges them.  The multi-row programs'
    attention (decode's with ``--attention split``): on the H200 it is 4-7 µs per layer
    faster than the one-launch kernel (docs/measurements.md, issue 16)."""
    cfg = asm.cfg
    D, H, KVH, s_min, S, r = _decode_geometry(asm, rows)
    s_arg = _s_min_arg(asm, program, rows, s_min)
    iface = _iface(asm, program, rows)
    cubin = "attn_decode_split.cubin"
    body = {"params": iface, "impl": {
        "scratch": _partials(r, H, S, D),
        "steps": [
            asm.own_step(cubin, f"kern_attn_decode_partial_bf16_d{D}",
                         params=[*iface[:5], "out buffer<f32>", "out buffer<f32>", "i32",
                                 "i64", "i64", "i64", "i64", "i32", "i32", "f32", "i32", "i32"],
                         block=[128, 1, 1], grid=[KVH, S, rows],
                         args=[*({"arg": i} for i in range(5)), {"scratch": "part_ml"},
                               {"scratch": "part_acc"}, {"i32": cfg.q_width}, *strides,
                               {"i32": H}, {"i32": KVH}, {"f32": 1.0 / math.sqrt(D)},
                               s_arg, {"i32": asm.kv.table_pages}]),
            _reduce_step(asm, D, H, S, rows, s_arg)]}}
    return asm.kernel(f"{program}.attention", body,
                      f"own split-KV decode attention, two launches ({s_min} to {S} splits by "
                      "context)")


def _split_kv(asm: Assembler, program: str, rows: Any, strides: list) -> str:
    """One launch (kernels/ABI.md 3a′, ``--attention one-launch``): split blocks write
    partials, the last to arrive for its (row, kv head) merges them in split order and
    writes ``out``."""
    cfg = asm.cfg
    D, H, KVH, s_min, S, r = _decode_geometry(asm, rows)
    iface = _iface(asm, program, rows)
    scratch = {**_partials(r, H, S, D),
               # Arrival counters, one per (row, kv head). Contract: zero before the first
               # launch (kern-runtime zero-fills the arena at load; the area is this kernel's
               # own) and zero after every complete launch (the last block of each (row, kv
               # head) resets its counter), so every dispatch and graph replay starts at zero.
               # `out` in the step: E0504 forbids reading scratch no step of the dispatch wrote.
               "counters": {"dtype": "u32", "shape": [r, KVH]}}
    step = asm.own_step(
        "attn_decode.cubin", f"kern_attn_decode_bf16_d{D}",
        params=[*DECODE_IFACE, "out buffer<f32>", "out buffer<f32>", "out buffer<u32>", "i32",
                "i64", "i64", "i64", "i64", "i32", "i32", "f32", "i32", "i32"],
        block=[128, 1, 1], grid=[KVH, S, rows],
        args=[*({"arg": i} for i in range(6)), {"scratch": "part_ml"}, {"scratch": "part_acc"},
              {"scratch": "counters"}, {"i32": cfg.q_width}, *strides, {"i32": H},
              {"i32": KVH}, {"f32": 1.0 / math.sqrt(D)},
              _s_min_arg(asm, program, rows, s_min), {"i32": asm.kv.table_pages}])
    body = {"params": iface, "impl": {"scratch": scratch, "steps": [step]}}
    return asm.kernel(f"{program}.attention", body,
                      f"own split-KV decode attention, one launch ({s_min} to {S} splits by "
                      "context)")


VERIFY_SPLITS = ("divided", "decode", "N")
"""``kern-gen --verify-splits``: how the split-KV attention splits the keys of the rows of a
one-sequence multi-row program (:data:`ONE_SEQUENCE`).  ``divided`` (the default) passes
``s_min`` and the kernel gives each of T rows ``max(1, s_min / T)`` splits: about the block
count of one decode row (what a batch of sequences needs).  An integer ``N`` passes ``N · T``
(the dispatch's expression of ``tokens``, through one more i32 interface parameter of the
attention kernel: a step argument is a literal or a forwarded one), so that every row gets at
least N splits, ``A = clamp(ceil(L / 512), N, S)`` (ABI.md 3a); ``decode`` is N = s_min, the
split count of a decode row of the same length.  Why: on the H200 the Qwen3-shape verify's
attention takes 10.2 µs a layer against decode's 6.8 (session 15's profile).  Measured
(session 16, docs/measurements.md): ``decode`` (16 splits a row, 1024 blocks) is slower,
15.1 µs a layer and the round 4.08 -> 4.50 ms."""
DEFAULT_VERIFY_SPLITS = "divided"
ONE_SEQUENCE = frozenset({"verify", "draft"})
"""Multi-row programs whose rows are one sequence's consecutive positions (every row the same
page table): the speculative verify and the DSpark draft; ``batch`` rows are sequences."""


def parse_verify_splits(value: str, kv_heads: int) -> int | None:
    """``--verify-splits`` -> the least splits a row of a one-sequence program gets (None:
    ``divided``).  Raises ValueError for anything but the :data:`VERIFY_SPLITS` forms."""
    if value == "divided":
        return None
    if value == "decode":
        return decode_splits(kv_heads)
    if value.isdigit() and 1 <= int(value) <= 256:
        return int(value)
    raise ValueError(f"--verify-splits `{value}`: choose divided, decode or a split count "
                     "1-256")


def per_row_splits(asm: Assembler, program: str, rows: Any) -> int | None:
    """The least splits a row of this program's attention gets, passed as ``N · tokens``
    (:data:`VERIFY_SPLITS`; with the ``rows`` kernel at least decode's count, since its
    blocks hold every row of a split); None where the kernel gets the literal ``s_min``."""
    if program not in ONE_SEQUENCE or rows != TOK:
        return None
    n = parse_verify_splits(asm.verify_splits, asm.cfg.kv_heads)
    if n is None and rows_attention(asm, program, rows):
        return decode_splits(asm.cfg.kv_heads)
    return n


VERIFY_ATTENTION = ("split", "rows", "verify-rows")
"""``kern-gen --verify-attention``: the attention partial of the one-sequence programs
(:data:`ONE_SEQUENCE`).  ``split`` (the default): :data:`DECODE_ATTENTION`'s, a block per (kv
head, split, row).  ``rows``: ``kern_attn_rows_partial`` (ABI.md 3b′, attn_prefill.cubin) in
verify and the DSpark draft, a block per (kv head, split) holding all rows' query heads in
one tensor-core tile, then the split-KV reduce; ``verify-rows``: that in verify only.  Why:
the split partial's verify blocks each walk their keys alone, 10.2 µs a layer on the H200
against decode's 6.8 (Qwen3-4B shape, session 15); with ``rows`` verify's GPU time in the
Qwen3-shape DSpark loop went 3.232 → 3.169 ms and the round 4.03 → 3.95 ms, 1.345 plain steps
(session 17, same run).  Not the default: with it in verify (``verify-rows`` as ``rows``) the
shipped SmolLM2 draft accepted less (open chat τ 2.49 → 2.32, math-code before the first
EOS 2.25 → 2.16; 1.70x → 1.55x to EOS), while the draft's own attention was not the cause
(docs/measurements.md issue 15, session 17): verify's hidden states feed the draft's context
through the taps, and the rows partial's arithmetic (P rounded to bf16 before P·V) differs
from the split partial's."""
DEFAULT_VERIFY_ATTENTION = "split"
ROWS_PROGRAMS = {"split": frozenset(), "rows": ONE_SEQUENCE,
                 "verify-rows": frozenset({"verify"})}
"""``--verify-attention`` choice -> the programs whose attention is the rows partial."""


def rows_attention(asm: Assembler, program: str, rows: Any) -> bool:
    """Does this program's attention use the tensor-core rows partial?"""
    return program in ROWS_PROGRAMS[asm.verify_attention] and rows == TOK


def _rows_two(asm: Assembler, program: str, rows: Any, strides: list) -> str:
    """The rows partial (ABI.md 3b′) into the split scratch, then the split-KV reduce of
    :func:`_split_kv_two`; both get ``N · tokens`` (the interface's 7th parameter), the
    partial also ``tokens`` (the 8th: a step argument is a literal or a forwarded one)."""
    cfg = asm.cfg
    D, H, KVH, s_min, S, r = _decode_geometry(asm, rows)
    iface = [*DECODE_IFACE, "i32", "i32"]
    body = {"params": iface, "impl": {
        "scratch": _partials(r, H, S, D),
        "steps": [
            asm.own_step("attn_prefill.cubin", f"kern_attn_rows_partial_bf16_d{D}",
                         params=[*iface[:5], "out buffer<f32>", "out buffer<f32>", "i32",
                                 "i64", "i64", "i64", "i64", "i32", "i32", "f32", "i32", "i32",
                                 "i32"],
                         block=[128, 1, 1], grid=[KVH, S, 1],
                         shared_mem=PREFILL_SMEM[D],
                         args=[*({"arg": i} for i in range(5)), {"scratch": "part_ml"},
                               {"scratch": "part_acc"}, {"i32": cfg.q_width}, *strides,
                               {"i32": H}, {"i32": KVH}, {"f32": 1.0 / math.sqrt(D)},
                               {"arg": 6}, {"i32": asm.kv.table_pages}, {"arg": 7}]),
            _reduce_step(asm, D, H, S, rows, {"arg": 6})]}}
    return asm.kernel(f"{program}.attention", body,
                      f"own tensor-core rows partial + split-KV reduce (at least "
                      f"{per_row_splits(asm, program, rows)} to {S} splits a row)")


def _s_min_arg(asm: Assembler, program: str, rows: Any, s_min: int) -> dict[str, Any]:
    """The ``s_min`` step argument of the split-KV kernels: the literal, or the interface's
    7th parameter (:func:`per_row_splits`)."""
    return {"arg": 6} if per_row_splits(asm, program, rows) else {"i32": s_min}


def _cluster(asm: Assembler, program: str, rows: Any, strides: list) -> str:
    """``--attention cluster`` / ``cluster-rope`` (kernels/ABI.md 3a″, :mod:`.attn_cluster`):
    decode's attention in one launch, the 8 key splits of a (row, kv head) one thread-block
    cluster merged over distributed shared memory (with ``cluster-rope``, the layers whose
    rope :mod:`.fuse_rope_attention` folded in are ``rope_attention`` ops instead).  In the
    decode step (kern-run bench, H100, PDL on; the shipped 256-thread build, c6 / c9) SmolLM2
    0.707 -> 0.640 ms/token, the Qwen3-4B shape 3.636 -> 3.582, accuracy against
    transformers unchanged (docs/measurements.md, session 22); from ~4k keys (d64) / ~16k
    (d128) on the pair is as fast or faster (ABI.md 3a″).  The other
    programs keep the pair (:func:`_split_kv_two`): their rows give the grid its parallelism."""
    if program != "decode":
        return _split_kv_two(asm, program, rows, strides)
    return AC.cluster(asm, program, rows)


DECODE_ATTENTION = {"split": _split_kv_two, "one-launch": _split_kv, "cluster": _cluster,
                    "cluster-rope": _cluster}
"""``kern-gen --attention`` -> the decode/verify/batch attention emitter."""
DEFAULT_ATTENTION = "cluster-rope"


def _flash(asm: Assembler, strides: list) -> str:
    cfg = asm.cfg
    D, H, KVH = cfg.head_dim, cfg.heads, cfg.kv_heads
    iface = ["in buffer<bf16>", "in ptr", "in ptr", "in buffer<i32>", "in buffer<i32>",
             "out buffer<bf16>", "i32"]
    body = {"params": iface, "impl": {"steps": [
        asm.own_step("attn_prefill.cubin", f"kern_attn_prefill_bf16_d{D}",
                     params=["in buffer<bf16>", "in ptr", "in ptr", "in buffer<i32>",
                             "in buffer<i32>", "out buffer<bf16>", "i32", "i64", "i64",
                             "i64", "i64", "i32", "i32", "i32", "f32"],
                     block=[128, 1, 1], grid=[{"ceil_div": [TOK, 64]}, H, 1],
                     shared_mem=PREFILL_SMEM[D],
                     args=[{"arg": 0}, {"arg": 1}, {"arg": 2}, {"arg": 3}, {"arg": 4},
                           {"arg": 5}, {"i32": cfg.q_width}, *strides, {"i32": H},
                           {"i32": KVH}, {"arg": 6}, {"f32": 1.0 / math.sqrt(D)}])]}}
    return asm.kernel("prefill.attention", body, "own flash prefill attention")


def argmax(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    """Greedy argmax of each of ``rows`` logit rows (grid x = row; the op's ``rows`` if
    given, else the program's)."""
    P, V = ARGMAX_PARTS, asm.cfg.vocab
    rows = op.args.get("rows", rows)
    r = "tokens" if rows == TOK else rows
    body = {"params": ["in buffer<bf16>", "out buffer<i64>"], "impl": {
        "scratch": {"part_val": {"dtype": "f32", "shape": [r, P]},
                    "part_idx": {"dtype": "i32", "shape": [r, P]}},
        "steps": [
            asm.own_step("argmax.cubin", "kern_argmax_bf16_partial",
                         params=["in buffer<bf16>", "out buffer<f32>", "out buffer<i32>",
                                 "i32"], block=[256, 1, 1], grid=[rows, P, 1],
                         args=[{"arg": 0}, {"scratch": "part_val"}, {"scratch": "part_idx"},
                               {"i32": V}]),
            asm.own_step("argmax.cubin", "kern_argmax_bf16_reduce",
                         params=["in buffer<f32>", "in buffer<i32>", "out buffer<i64>",
                                 "i32"], block=[32, 1, 1], grid=[rows, 1, 1],
                         args=[{"scratch": "part_val"}, {"scratch": "part_idx"}, {"arg": 1},
                               {"i32": P}])]}}
    name = asm.kernel("argmax" if rows == 1 else f"{program}.argmax", body,
                      "own two-stage argmax")
    return {"label": op.label, "kernel": name,
            "args": [asm.arg(op.args["logits"]), asm.arg(op.args["out"])]}


def decode_splits(kv_heads: int) -> int:
    """The fewest key splits a row of the own decode attention uses (short contexts): the
    power of two nearest 128 / kv_heads blocks per kv head (grid kv_heads x S, about one
    block per SM of the H200's 132).

    Measured on the H200 (2026-11-30, packages/kern-gen/kernels/bench.py, median µs per
    call): time grows with S at every context up to 4096 (more blocks and a longer merge)
    while a small S loses parallelism only at long contexts; 32q/8kv d128: S = 16 / 32 / 48
    -> 7.4 / 10.4 / 13.6 µs at ctx 512, 17.0 / 17.1 / 19.4 at ctx 4096; 9q/3kv d64: S = 32 /
    64 / 128 -> 8.5 / 12.9 / 21.9 at ctx 512, 9.8 / 14.4 / 22.0 at ctx 4096. The earlier
    rule (~3 blocks per SM: 48 and 128) cost 6 and 13 µs per layer."""
    target = max(1.0, 128 / kv_heads)
    return 1 << max(0, round(math.log2(target)))
