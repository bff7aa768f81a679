"""The GEMM ops' kernels: one interface, several implementations (:data:`GEMM_IMPLS`).

Every GEMM kernel has the interface of ``extern:cublaslt_bf16_tn`` (:data:`PARAMS` =
``[a, w, c, m, n, k]``, row-major ``C[m, n] = A[m, k]·W[n, k]ᵀ``) and every GEMM dispatch
passes ``[a, w, c, rows, n, k]``.  The wide programs (``prefill``, ``batch``: up to
``tokens.max`` rows) share the one kernel ``gemm``, always cuBLASLt.  The few-row programs
(:data:`.programs.FEW_ROWS`: ``decode``, ``verify``) declare one kernel per GEMM shape,
``<program>.gemm.<n>x<k>``, whose impl is the one chosen at generation (``kern-gen …
--gemm``): the programs (kernel names, arguments) and the kernels' params are the same for
every choice, only those kernels' impls differ.  The names are keyed explicitly
(:meth:`.assemble.Assembler.kernel_named`): the cuBLASLt bodies are all alike and would
otherwise be merged into one kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .errors import WiringError
from .ir import TOK, Op
from .programs import FEW_ROWS

if TYPE_CHECKING:
    from .assemble import Assembler

PARAMS = ["in buffer<bf16>", "in buffer<bf16>", "out buffer<bf16>", "i32", "i32", "i32"]
"""``[a, w, c, m, n, k]``: the interface of every GEMM kernel (and of both impls' steps)."""

CUBLASLT = "extern:cublaslt_bf16_tn"
GEMV_CUBIN, GEMV_SYMBOL = "gemv.cubin", "kern_gemv_bf16"
GEMV_COLS = 16
"""Output columns (rows of W) per block of the own GEMV (kernels/ABI.md 4)."""
GEMV_ROWS = 8
"""Rows of A per block (grid.y = ceil(m / 8))."""
GEMV_MAX_WARPS = 16
GEMV_TARGET_WARPS = 132 * 24
"""Warps the rule aims the whole grid at: about 24 per SM of the H200's 132 (the kernel uses
56 registers: up to 36 warps per SM fit), each with 4 KB of W in flight."""


def gemv_warps(n: int, k: int) -> int:
    """Warps per block of the GEMV for an ``n x k`` weight: the largest power of two at most
    16, at most the k steps of 32 (no idle warp) and at most :data:`GEMV_TARGET_WARPS` over
    the ``ceil(n / 16)`` blocks (at least 1).  Qwen3-4B: qkv 8, o 16, gate_up 2, down 16,
    lm_head 1; SmolLM2-135M: 16 but lm_head 1."""
    blocks = -(-n // GEMV_COLS)
    cap = min(GEMV_MAX_WARPS, -(-k // 32), GEMV_TARGET_WARPS // blocks)
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
    gy = -(-rows // GEMV_ROWS) if isinstance(rows, int) else {"ceil_div": [TOK, GEMV_ROWS]}
    # weights_first: gemv.cu loads its first W tile before the grid-dependency wait
    st = asm.own_step(GEMV_CUBIN, GEMV_SYMBOL, weights_first=True, params=PARAMS,
                      block=[32 * nw, 1, 1], grid=[-(-n // GEMV_COLS), gy, 1], args=[{"arg": i} for i in range(6)])
    return {"steps": [st]}, f"own `{GEMV_SYMBOL}` (blocks of 16 columns x {nw} warps)"


GemmImpl = Callable[["Assembler", Any, int, int], "tuple[dict[str, Any], str]"]
GEMM_IMPLS: dict[str, GemmImpl] = {"cublaslt": cublaslt_impl, "gemv": gemv_impl}
"""``--gemm`` choice -> (assembler, rows, n, k) -> (impl, report source) of a few-row
program's GEMM kernel; the wide programs' ``gemm`` is always ``cublaslt``."""


def check_impl(name: str) -> None:
    if name not in GEMM_IMPLS:
        raise WiringError(f"GEMM implementation `{name}`: the generator has "
                          f"{', '.join(sorted(GEMM_IMPLS))}")


def gemm(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    """The dispatch of a GEMM op; ``m`` = the program's rows."""
    check_impl(asm.gemm_impl)
    a = op.args
    n, k = a["n"], a["k"]
    args = [asm.arg(a["a"]), asm.arg(a["w"]), asm.arg(a["c"]),
            {"sym": "tokens"} if rows == TOK else {"i32": rows}, {"i32": n}, {"i32": k}]
    if program not in FEW_ROWS:
        impl, source = cublaslt_impl(asm, rows, n, k)
        name = asm.kernel("gemm", {"params": PARAMS, "impl": impl}, source)
        return {"label": op.label, "kernel": name, "args": args}
    impl, source = GEMM_IMPLS[asm.gemm_impl](asm, rows, n, k)
    if asm.gemm_impl == "gemv":
        for ref, what in ((a["a"], "A"), (a["w"], "W")):
            if ref.offset % 16:
                raise WiringError(f"{program}: {op.label}: {what} at byte offset {ref.offset}"
                                  f" of `{ref.buf}`; the own GEMV needs 16-byte alignment")
    name = asm.kernel_named(f"{program}.gemm.{n}x{k}", {"params": PARAMS, "impl": impl},
                            source)
    return {"label": op.label, "kernel": name, "args": args}
