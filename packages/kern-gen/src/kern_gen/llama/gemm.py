"""The GEMM ops' kernels: one interface, several implementations (:data:`GEMM_IMPLS`).

Every GEMM kernel has the interface of ``extern:cublaslt_bf16_tn`` (:data:`PARAMS` =
``[a, w, c, m, n, k]``, row-major ``C[m, n] = A[m, k]·W[n, k]ᵀ``) and every GEMM dispatch
passes ``[a, w, c, rows, n, k]``.  The wide programs (``prefill``, ``batch``: up to
``tokens.max`` rows) share the one kernel ``gemm``, always cuBLASLt.  The few-row programs
(:data:`.programs.GEMV_GEMMS`: ``decode``, ``verify``, DSpark's ``decode_spec``, ``draft``
and ``draft_precompute``) declare one kernel per GEMM shape,
``<program>.gemm.<n>x<k>``, whose impl is the one chosen at generation (``kern-gen …
--gemm``): the programs (kernel names, arguments) and the kernels' params are the same for
every choice, only those kernels' impls differ.  The names are keyed explicitly
(:meth:`.assemble.Assembler.kernel_named`): the cuBLASLt bodies are all alike and would
otherwise be merged into one kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from . import gemm_splitk as SK
from .errors import WiringError
from .ir import TOK, Op, Ref
from .programs import FEW_ROWS, GEMV_GEMMS

if TYPE_CHECKING:
    from .assemble import Assembler

PARAMS = ["in buffer<bf16>", "in buffer<bf16>", "out buffer<bf16>", "i32", "i32", "i32"]
"""``[a, w, c, m, n, k]``: the interface of every GEMM kernel (and of both impls' steps)."""

CUBLASLT = "extern:cublaslt_bf16_tn"
CUBLASLT_ACC = "extern:cublaslt_bf16_tn_acc"
ACC_PARAMS = [*PARAMS[:2], "inout buffer<bf16>", *PARAMS[3:]]
"""``[a, w, c, m, n, k]`` with ``C += A·Wᵀ`` (β = 1): the accumulating GEMM (DSpark's tap
projections and Markov head): cuBLASLt, or in the few-row programs the own
``kern_gemv_acc_bf16`` (:data:`ACC_IMPLS`)."""
ACC_SYMBOL = "kern_gemv_acc_bf16"
ACC_IMPLS = ("cublaslt", "gemv")
"""``--gemm-acc`` choices (kern-gen dspark): ``gemv`` (the default) puts the few-row programs'
accumulating GEMMs (the tap projections of verify and decode_spec) on the own GEMV.  Measured
on the H200 (session 17, docs/measurements.md issue 15): verify's GPU time 3.236 → 3.202 ms
(same run) on the Qwen3-4B shape (it keeps the PDL chain that a cuBLASLt launch breaks),
SmolLM2's 0.764 → 0.754 ms, the shipped draft's acceptance unchanged.  (The draft's Markov head, where the
GEMV was slower, is now one own kernel: :mod:`.markov`.)"""
ACC_GEMV = {"cublaslt": frozenset(), "gemv": FEW_ROWS}
"""``--gemm-acc`` choice -> the programs whose ``C += A·Wᵀ`` run ``kern_gemv_acc_bf16``."""
DEFAULT_ACC = "gemv"
GEMV_CUBIN, GEMV_SYMBOL = "gemv.cubin", "kern_gemv_bf16"
SILU_SYMBOL, SPLIT_SYMBOL = "kern_gemv_silu_bf16", "kern_gemv_split3_bf16"
EARLY_TWINS = {(GEMV_CUBIN, GEMV_SYMBOL): "kern_gemv_et_bf16",
               (GEMV_CUBIN, SILU_SYMBOL): "kern_gemv_silu_et_bf16",
               ("gemv_norm.cubin", "kern_gemv_rnorm_bf16"): "kern_gemv_rnorm_et_bf16"}
"""(cubin, symbol) -> its twin in the same cubin with the same contract and bits whose
dependents launch right after its wait: the assembler's choice for a GEMV right before a
step that reads before its own wait (:func:`.pdl_order.early_triggers`) or a small decode
GEMV (:func:`.pdl_order.small_early_triggers`, by :data:`WEIGHT_ROWS`)."""
WEIGHT_ROWS = {GEMV_SYMBOL: 1, SILU_SYMBOL: 2}
"""W rows per output column of a twin-able GEMV with the ``[a, w, c, m, n, k]`` arguments."""
SPLIT_PARAMS = [*PARAMS[:2], *["out buffer<bf16>"] * 3, *["i32"] * 5]
"""``[a, w, c0, c1, c2, m, n0, n1, n2, k]``: the q/k/v GEMV of :mod:`.fuse` (ABI.md 4b)."""
GEMV_COLS = 16
"""Output columns (rows of W) per block of the own GEMV (kernels/ABI.md 4)."""
GEMV_ROWS = 8
"""Rows of A per block (grid.y = ceil(m / 8))."""
GEMV_MAX_WARPS = 16
GEMV_WARP_CAPS = ((256, 16), (2048, 8), (None, 4))
"""(most blocks, most warps per block): a grid of ``ceil(n / 16)`` blocks gets at most that
many warps each.  Measured on the H200 (kernels bench, 2026-12-02, µs at m = 1, NW = 1/2/4/8/16):
Qwen3-4B qkv 6144x2560 (384 blocks) 46.8/25.8/14.8/10.9/12.5; gate_up 19456x2560 (1216)
57.0/33.3/32.8/29.3/30.5; lm_head 151936x2560 (9496) 354/195/189/189/205; o 2560x4096 (160)
and down 2560x9728 (160) best at 16; SmolLM2 lm_head 49152x576 (3072) 25.6/18.3/17.6/20.1/26.5,
its other shapes (36-192 blocks) best at 16 or 8 within 1 %."""
DEFAULT_GEMM = "gemv"
"""``kern-gen --gemm`` default: the own GEMV beat cuBLASLt end to end on SmolLM2 (decode 0.86
vs 1.08 ms/token with PDL, same run) and gave the Qwen3-4B shape 3.07 ms/token (the
pre-issue cuBLASLt kernels with PDL: 3.29 in the lever run); alone it is faster on o, down and
SmolLM2's four layer GEMMs and up to 7 % slower on the rest (Qwen3 gate_up 29.2 vs 27.8 µs,
SmolLM2 lm_head 17.5 vs 16.5; docs/measurements.md, issue 16)."""


def gemv_warps(n: int, k: int) -> int:
    """Warps per block of the GEMV for an ``n x k`` weight: the largest power of two at most
    16, at most the k steps of 32 (no idle warp) and at most the cap of
    :data:`GEMV_WARP_CAPS` for the grid's ``ceil(n / 16)`` blocks.  Qwen3-4B: qkv 8, o 16,
    gate_up 8, down 16, lm_head 4; SmolLM2-135M: 16 but lm_head 4."""
    blocks = -(-n // GEMV_COLS)
    grid_cap = next(c for most, c in GEMV_WARP_CAPS if most is None or blocks <= most)
    cap = min(GEMV_MAX_WARPS, -(-k // 32), grid_cap)
    nw = 1
    while nw * 2 <= cap:
        nw *= 2
    return nw


def cublaslt_impl(asm: Assembler, rows: Any, n: int, k: int) -> tuple[dict[str, Any], str]:
    """The runtime's cuBLASLt extern (geometry meaningless, ``[1, 1, 1]``)."""
    st = asm.extern_step(CUBLASLT, params=PARAMS, block=[1, 1, 1], grid=[1, 1, 1],
                         args=[{"arg": i} for i in range(6)])
    return {"steps": [st]}, f"extern cuBLASLt (`{CUBLASLT}`)"


def gemv_impl(asm: Assembler, rows: Any, n: int, k: int) -> tuple[dict[str, Any], str]:
    """The own GEMV (kernels/gemv.cu): grid ``[ceil(n/16), ceil(rows/8), 1]``, block
    ``[32·NW, 1, 1]`` (:func:`gemv_warps`), the interface's arguments forwarded."""
    if k % 8:
        raise WiringError(f"GEMM n {n} k {k}: the own GEMV needs k % 8 == 0")
    nw = gemv_warps(n, k)
    st = _gemv_step(asm, GEMV_SYMBOL, PARAMS, n, nw, rows)
    return {"steps": [st]}, f"own `{GEMV_SYMBOL}` (blocks of 16 columns x {nw} warps)"


TMA_CUBIN = "gemv_tma.cubin"
TMA_SYMBOLS = {"gemm": "kern_gemv_tma_bf16", "silu": "kern_gemv_tma_silu_bf16",
               "split": "kern_gemv_tma_split3_bf16"}
"""The bulk-copy GEMV's entry points (kernels/gemv_tma.cu, ABI.md 4d) by the gemv.cu kernel
each one replaces under ``--gemm tma``: same parameters, same per-dot-product arithmetic."""
TMA_BLOCK = [160, 1, 1]
"""4 consumer warps + 1 producer warp (the kernel traps on another block)."""
TMA_SMEM = {1: 67616, 2: 135200}
"""Dynamic shared memory by W tiles per block (1: plain and split3, 2: the fused gate/up
pair): 2 stages x 16 rows (32 fused) x (1024 x 2 + 64 padding) bytes + 4 mbarriers, as
``kern_gemv_tma_smem`` reports (the GPU test checks the two agree)."""
TMA_GRID_CAP = {1: 3 * SK.SMS, 2: SK.SMS}
"""Persistent grid: at most this many blocks (the H200's 132 SMs x the blocks a SM holds with
228 KB of shared memory: 3 unfused, 1 fused); any grid is correct (blocks stride over the
16-column tiles), this one keeps every block resident."""


def tma_step(asm: Assembler, kind: str, params: list[str], cols: int, rows: Any,
             tiles: int = 1) -> dict[str, Any]:
    """A step of a gemv_tma.cu kernel over ``cols`` output columns (``tiles`` W tiles per
    block: 2 for the fused gate/up pair), 8 rows per grid y; weights only before its wait."""
    gy = -(-rows // GEMV_ROWS) if isinstance(rows, int) else {"ceil_div": [TOK, GEMV_ROWS]}
    gx = min(-(-cols // GEMV_COLS), TMA_GRID_CAP[tiles])
    return asm.own_step(TMA_CUBIN, TMA_SYMBOLS[kind], weights_first=True, params=params,
                        block=TMA_BLOCK, grid=[gx, gy, 1], shared_mem=TMA_SMEM[tiles],
                        args=[{"arg": i} for i in range(len(params))])


def tma_rows(asm: Assembler, rows: Any) -> bool:
    """Does ``--gemm tma`` put this GEMM on the bulk-copy GEMV?  Only one-row GEMMs (decode,
    decode_spec): in the multi-row programs (verify, draft) the H200 measured the DSpark loop
    giving different tokens on identical runs with it (PDL on and off; plain decode
    deterministic; docs/measurements.md issue 16, session 15), so those keep gemv.cu's
    kernels.  Session 28 found and fixed a stage-reuse race in the kernel (ABI.md 4d) that
    showed at m = 8; the DSpark loop on it has not been rerun."""
    return asm.gemm_impl == "tma" and rows == 1


def tma_impl(asm: Assembler, rows: Any, n: int, k: int) -> tuple[dict[str, Any], str]:
    """The bulk-copy GEMV (kernels/gemv_tma.cu): a persistent grid of 160-thread blocks; the
    register GEMV where :func:`tma_rows` says no."""
    if not tma_rows(asm, rows):
        return gemv_impl(asm, rows, n, k)
    if k % 8:
        raise WiringError(f"GEMM n {n} k {k}: the own GEMV needs k % 8 == 0")
    st = tma_step(asm, "gemm", PARAMS, n, rows)
    return {"steps": [st]}, f"own `{TMA_SYMBOLS['gemm']}` (bulk-copy W stream)"


def splitk_impl(asm: Assembler, rows: Any, n: int, k: int) -> tuple[dict[str, Any], str]:
    """gemv.cu's GEMV, or where :func:`.gemm_splitk.splits` says so the same blocks with k
    split over a cluster (kernels/gemv_splitk.cu)."""
    s = SK.splits(n, k)
    if s == 1:
        return gemv_impl(asm, rows, n, k)
    if k % 8:
        raise WiringError(f"GEMM n {n} k {k}: the own GEMV needs k % 8 == 0")
    nw = gemv_warps(n, k)
    st = SK.splitk_step(asm, s, False, PARAMS, n, nw, rows)
    return {"steps": [st]}, f"own `{SK.symbol(s, False)}` (k in {s} splits, {nw} warps)"


OWN_GEMV = ("gemv", "tma", "splitk")
"""The impls that are kern's own GEMV (16-byte alignment checks; the fused variants)."""

GemmImpl = Callable[["Assembler", Any, int, int], "tuple[dict[str, Any], str]"]
GEMM_IMPLS: dict[str, GemmImpl] = {"cublaslt": cublaslt_impl, "gemv": gemv_impl,
                                   "tma": tma_impl, "splitk": splitk_impl}
"""``--gemm`` choice -> (assembler, rows, n, k) -> (impl, report source) of a few-row
program's GEMM kernel; the wide programs' ``gemm`` is always ``cublaslt``."""


def check_impl(name: str) -> None:
    if name not in GEMM_IMPLS:
        raise WiringError(f"GEMM implementation `{name}`: the generator has "
                          f"{', '.join(sorted(GEMM_IMPLS))}")


def _m(rows: Any) -> dict[str, Any]:
    return {"sym": "tokens"} if rows == TOK else {"i32": rows}


def gemm_acc(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    """``C += A·Wᵀ`` (args ``a``, ``w``, ``acc``; ``m`` = the op's ``rows`` if given, else the
    program's): the cuBLASLt β = 1 extern (one kernel ``gemm_acc`` for every program), or in
    the programs :data:`ACC_GEMV` names for ``--gemm-acc`` the own ``kern_gemv_acc_bf16`` per
    shape (``<program>.gemm_acc.<n>x<k>``)."""
    a = op.args
    rows = a.get("rows", rows)
    n, k = a["n"], a["k"]
    args = [asm.arg(a["a"]), asm.arg(a["w"]), asm.arg(a["acc"]), _m(rows), {"i32": n},
            {"i32": k}]
    if program in ACC_GEMV[asm.acc_impl]:
        _gemv_checks(program, op, ((a["a"], "A"), (a["w"], "W")))
        nw = gemv_warps(n, k)
        st = _gemv_step(asm, ACC_SYMBOL, ACC_PARAMS, n, nw, rows)
        name = asm.kernel_named(f"{program}.gemm_acc.{n}x{k}",
                                {"params": ACC_PARAMS, "impl": {"steps": [st]}},
                                f"own `{ACC_SYMBOL}` (C += A·Wᵀ, {nw} warps)")
        return {"label": op.label, "kernel": name, "args": args}
    st = asm.extern_step(CUBLASLT_ACC, params=ACC_PARAMS, block=[1, 1, 1], grid=[1, 1, 1],
                         args=[{"arg": i} for i in range(6)])
    name = asm.kernel("gemm_acc", {"params": ACC_PARAMS, "impl": {"steps": [st]}},
                      f"extern cuBLASLt, accumulating (`{CUBLASLT_ACC}`)")
    return {"label": op.label, "kernel": name, "args": args}


def gemm(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    """The dispatch of a GEMM op; ``m`` = the op's ``rows`` if given, else the program's."""
    check_impl(asm.gemm_impl)
    a = op.args
    rows = a.get("rows", rows)
    n, k = a["n"], a["k"]
    args = [asm.arg(a["a"]), asm.arg(a["w"]), asm.arg(a["c"]), _m(rows), {"i32": n},
            {"i32": k}]
    if program not in GEMV_GEMMS:
        impl, source = cublaslt_impl(asm, rows, n, k)
        name = asm.kernel("gemm", {"params": PARAMS, "impl": impl}, source)
        return {"label": op.label, "kernel": name, "args": args}
    impl, source = GEMM_IMPLS[asm.gemm_impl](asm, rows, n, k)
    if asm.gemm_impl in OWN_GEMV:
        for ref, what in ((a["a"], "A"), (a["w"], "W")):
            if ref.offset % 16:
                raise WiringError(f"{program}: {op.label}: {what} at byte offset {ref.offset}"
                                  f" of `{ref.buf}`; the own GEMV needs 16-byte alignment")
    name = asm.kernel_named(f"{program}.gemm.{n}x{k}", {"params": PARAMS, "impl": impl},
                            source)
    return {"label": op.label, "kernel": name, "args": args}


def _gemv_checks(program: str, op: Op, refs: tuple[tuple[Ref, str], ...]) -> None:
    if op.args["k"] % 8:
        raise WiringError(f"{program}: {op.label}: k {op.args['k']}; the own GEMV needs "
                          f"k % 8 == 0")
    for ref, what in refs:
        if ref.offset % 16:
            raise WiringError(f"{program}: {op.label}: {what} at byte offset {ref.offset} of "
                              f"`{ref.buf}`; the own GEMV needs 16-byte alignment")


def _gemv_step(asm: Assembler, symbol: str, params: list[str], cols: int, nw: int,
               rows: Any, cubin: str = GEMV_CUBIN) -> dict[str, Any]:
    """A step of a gemv.cu kernel: ``cols`` output columns in blocks of 16, ``nw`` warps, 8
    rows per grid y, the interface's arguments forwarded; ``weights_first``: every gemv.cu
    kernel's source loads its first W tile before the grid-dependency wait (the built code
    requests it after: kernels/gemv_core.cuh ``ld_w_first``)."""
    gy = -(-rows // GEMV_ROWS) if isinstance(rows, int) else {"ceil_div": [TOK, GEMV_ROWS]}
    return asm.own_step(cubin, symbol, weights_first=True, params=params,
                        block=[32 * nw, 1, 1], grid=[-(-cols // GEMV_COLS), gy, 1],
                        args=[{"arg": i} for i in range(len(params))])


def gemm_silu(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    """``C = SiLU(A·W_gᵀ) · (A·W_uᵀ)``, ``W = [W_g; W_u]`` (:mod:`.fuse`): the own
    ``kern_gemv_silu_bf16`` with the block size of the merged GEMM it replaces
    (:func:`gemv_warps` of ``2n x k``: the same bits of g and u)."""
    a = op.args
    rows = a.get("rows", rows)
    n, k = a["n"], a["k"]
    _gemv_checks(program, op, ((a["a"], "A"), (a["w"], "W")))
    s = SK.splits(n, k, tiles=2) if asm.gemm_impl == "splitk" else 1
    if tma_rows(asm, rows):
        st = tma_step(asm, "silu", PARAMS, n, rows, tiles=2)
        how = f"own `{TMA_SYMBOLS['silu']}` (gate/up GEMV + SiLU·mul, bulk-copy W stream)"
    elif s > 1:
        nw = gemv_warps(2 * n, k)
        st = SK.splitk_step(asm, s, True, PARAMS, n, nw, rows)
        how = (f"own `{SK.symbol(s, True)}` (gate/up GEMV + SiLU·mul, k in {s} splits, "
               f"{nw} warps)")
    else:
        nw = gemv_warps(2 * n, k)
        st = _gemv_step(asm, SILU_SYMBOL, PARAMS, n, nw, rows)
        how = f"own `{SILU_SYMBOL}` (gate/up GEMV + SiLU·mul, {nw} warps)"
    name = asm.kernel_named(f"{program}.gemm_silu.{n}x{k}",
                            {"params": PARAMS, "impl": {"steps": [st]}}, how)
    return {"label": op.label, "kernel": name,
            "args": [asm.arg(a["a"]), asm.arg(a["w"]), asm.arg(a["c"]), _m(rows),
                     {"i32": n}, {"i32": k}]}


def gemm_split(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    """Three GEMMs of one input on contiguous weight rows, each part into its own buffer
    (:mod:`.fuse`): the own ``kern_gemv_split3_bf16``, block size of the merged shape."""
    a = op.args
    rows = a.get("rows", rows)
    widths, k = (a["n0"], a["n1"], a["n2"]), a["k"]
    n = sum(widths)
    _gemv_checks(program, op, ((a["a"], "A"), (a["w"], "W")))
    if tma_rows(asm, rows):
        st = tma_step(asm, "split", SPLIT_PARAMS, n, rows)
        how = f"own `{TMA_SYMBOLS['split']}` (q/k/v GEMV in one launch, bulk-copy W stream)"
    else:
        nw = gemv_warps(n, k)
        st = _gemv_step(asm, SPLIT_SYMBOL, SPLIT_PARAMS, n, nw, rows)
        how = f"own `{SPLIT_SYMBOL}` (q/k/v GEMV in one launch, {nw} warps)"
    name = asm.kernel_named(f"{program}.gemm_split.{'+'.join(map(str, widths))}x{k}",
                            {"params": SPLIT_PARAMS, "impl": {"steps": [st]}}, how)
    return {"label": op.label, "kernel": name,
            "args": [asm.arg(a["a"]), asm.arg(a["w"]), asm.arg(a["c0"]), asm.arg(a["c1"]),
                     asm.arg(a["c2"]), _m(rows), *({"i32": x} for x in widths), {"i32": k}]}


NORM_CUBIN = "gemv_norm.cubin"
NORM_SYMBOLS = {"gemm_norm": "kern_gemv_norm_bf16", "gemm_rnorm": "kern_gemv_rnorm_bf16",
                "gemm_rnorm_silu": "kern_gemv_rnorm_silu_bf16", "gemm_res": "kern_gemv_res_bf16"}
"""The GEMVs that carry the RMSNorms (kernels/gemv_norm.cu, ABI.md 4e) by the op kind of
:mod:`.fuse_norm`."""
NORM_PARAMS = ["in buffer<bf16>", "in buffer<bf16>", "out buffer<f32>", "in buffer<bf16>",
               "out buffer<bf16>", "i32", "i32", "i32", "f32"]
"""``[x, g, xo, w, c, m, n, k, eps]``: norm 0 and the GEMV after it (ABI.md 4e)."""
RNORM_PARAMS = ["in buffer<f32>", "in buffer<f32>", "in buffer<bf16>", "in buffer<bf16>",
                "out buffer<bf16>", "i32", "i32", "i32", "i32", "f32"]
"""``[r, parts, g, w, c, m, n, k, p, eps]``: norm ``t > 0`` and the GEMV after it."""
RES_PARAMS = ["in buffer<bf16>", "in buffer<bf16>", "inout buffer<f32>", "out buffer<f32>",
              "i32", "i32", "i32"]
"""``[a, w, r, parts, m, n, k]``: the GEMM whose output a norm adds (ABI.md 4e)."""
NORM_MAX_ELEMS, NORM_MAX_K = 8192, 4096
"""Elements of A a block of the norm kernels holds in shared memory (its rows x k), and the
largest k (the norm weight it stages there)."""


def _norm_rows(program: str, op: Op, rows: Any, k: int) -> None:
    if (not isinstance(rows, int) or min(rows, GEMV_ROWS) * k > NORM_MAX_ELEMS
            or k > NORM_MAX_K):
        raise WiringError(f"{program}: {op.label}: {rows} rows of k {k} do not fit the "
                          f"{NORM_MAX_ELEMS} elements of A (k <= {NORM_MAX_K}) "
                          f"`{NORM_SYMBOLS[op.kind]}` holds a block")


def gemm_norm(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    """A norm and the GEMV after it in one launch (:mod:`.fuse_norm`): norm 0
    (``gemm_norm``: the bf16 residual ``x``, the f32 stream started in ``xo``) or a later one
    (``gemm_rnorm[_silu]``: the f32 residual ``r`` and its ``p`` partial sums ``ss``), with
    the block size of the GEMV it replaces (:func:`gemv_warps` of ``n x k``, ``2n x k`` for
    gate/up: the same dot products)."""
    a = op.args
    rows = a.get("rows", rows)
    n, k = a["n"], a["k"]
    _norm_rows(program, op, rows, k)
    symbol, silu = NORM_SYMBOLS[op.kind], op.kind == "gemm_rnorm_silu"
    first = op.kind == "gemm_norm"
    refs = ((a["x"], "x"), (a["xo"], "xo")) if first else ((a["r"], "r"), (a["ss"], "ss"))
    _gemv_checks(program, op, (*refs, (a["g"], "g"), (a["w"], "W")))
    nw = gemv_warps(2 * n if silu else n, k)
    params = NORM_PARAMS if first else RNORM_PARAMS
    st = _gemv_step(asm, symbol, params, n, nw, rows, NORM_CUBIN)
    what = "gate/up GEMV + SiLU·mul" if silu else "GEMV"
    name = asm.kernel_named(f"{program}.{op.kind}.{n}x{k}",
                            {"params": params, "impl": {"steps": [st]}},
                            f"own `{symbol}` (RMSNorm{' 0' if first else ''} + {what}, "
                            f"{nw} warps)")
    head = ([asm.arg(a["x"]), asm.arg(a["g"]), asm.arg(a["xo"])] if first else
            [asm.arg(a["r"]), asm.arg(a["ss"]), asm.arg(a["g"])])
    tail = [] if first else [{"i32": a["p"]}]
    return {"label": op.label, "kernel": name,
            "args": [*head, asm.arg(a["w"]), asm.arg(a["c"]), _m(rows), {"i32": n},
                     {"i32": k}, *tail, {"f32": a["eps"]}]}


def gemm_res(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    """The GEMM whose output a norm adds (:mod:`.fuse_norm`): ``kern_gemv_res_bf16`` adds
    it to the f32 residual ``res`` in place and writes the blocks' sums of squares into
    ``parts``; the block size of the GEMV it replaces (at least 4 warps: the kernel's
    epilogue)."""
    a = op.args
    n, k = a["n"], a["k"]
    _gemv_checks(program, op, ((a["a"], "A"), (a["w"], "W"), (a["res"], "res")))
    nw = gemv_warps(n, k)
    if nw < 4:
        raise WiringError(f"{program}: {op.label}: {nw} warps for n {n} k {k}; "
                          f"`kern_gemv_res_bf16` needs at least 4")
    st = _gemv_step(asm, NORM_SYMBOLS["gemm_res"], RES_PARAMS, n, nw, rows, NORM_CUBIN)
    name = asm.kernel_named(f"{program}.gemm_res.{n}x{k}",
                            {"params": RES_PARAMS, "impl": {"steps": [st]}},
                            f"own `kern_gemv_res_bf16` (GEMV + residual add + partial sums "
                            f"of squares, {nw} warps)")
    return {"label": op.label, "kernel": name,
            "args": [asm.arg(a["a"]), asm.arg(a["w"]), asm.arg(a["res"]),
                     asm.arg(a["parts"]), _m(rows), {"i32": n}, {"i32": k}]}
