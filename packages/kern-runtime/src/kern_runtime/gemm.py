"""The built-in GEMM externs mapped onto cuBLASLt's column-major convention (pure).

``extern:cublaslt_bf16_tn`` computes row-major ``C[m,n] = A[m,k] · W[n,k]ᵀ`` (bf16 in and out,
f32 accumulation); ``…_acc`` computes ``C += A · Wᵀ`` (β = 1).

A row-major ``R×S`` matrix with row stride S is the column-major ``S×R`` matrix with leading
dimension S. So, in column-major terms: ``A`` is ``k×m`` (ld k), ``W`` is ``k×n`` (ld k) and
``C`` is ``n×m`` (ld n), and ``C = Wᵀ · A``: cuBLASLt's operand A is our W with
``transa = T``, its operand B is our A with ``transb = N``, and its problem is
``M = n, N = m, K = k`` with ``lda = ldb = k`` and ``ldc = n``.
"""

from __future__ import annotations

from dataclasses import dataclass

OP_N = 0  # CUBLAS_OP_N
OP_T = 1  # CUBLAS_OP_T

#: cuBLASLt never assumes more alignment than this.
MAX_ALIGN = 256


def pointer_alignment(address: int, cap: int = MAX_ALIGN) -> int:
    """Largest power of two (≤ ``cap``) dividing ``address``."""
    if address == 0:
        return cap
    return min(cap, address & -address)


@dataclass(frozen=True, slots=True)
class LtProblem:
    """One cuBLASLt matmul ``D = α·op(A)·op(B) + β·C`` (C and D the same matrix)."""

    transa: int
    transb: int
    # Layouts as stored (before op): rows, cols, leading dimension (column-major).
    a_layout: tuple[int, int, int]
    b_layout: tuple[int, int, int]
    c_layout: tuple[int, int, int]
    a: int          # device addresses
    b: int
    c: int
    beta: float

    @property
    def shape_key(self) -> tuple:
        """What the algorithm choice depends on: layouts, transposes, β and the pointer
        alignments (cuBLASLt kernels may require aligned operands)."""
        return (self.transa, self.transb, self.a_layout, self.b_layout, self.c_layout,
                self.beta != 0.0, pointer_alignment(self.a), pointer_alignment(self.b),
                pointer_alignment(self.c))


def row_major_tn(m: int, n: int, k: int, a: int, w: int, c: int, accumulate: bool) -> LtProblem:
    """The cuBLASLt problem for row-major ``C[m,n] (+)= A[m,k] · W[n,k]ᵀ``."""
    return LtProblem(
        transa=OP_T, transb=OP_N,
        a_layout=(k, n, k),   # W row-major [n,k] = column-major k×n, ld k; op = T gives n×k
        b_layout=(k, m, k),   # A row-major [m,k] = column-major k×m, ld k
        c_layout=(n, m, n),   # C row-major [m,n] = column-major n×m, ld n
        a=w, b=a, c=c, beta=1.0 if accumulate else 0.0)
