// kern own kernels: bf16 GEMV for few rows (m <= 8 per block), an alternative implementation
// of the manifest GEMM kernel `C[m, n] = A[m, k] . W[n, k]^T` (the `extern:cublaslt_bf16_tn`
// interface).  See ABI.md section 4.
//
// Why an own kernel (the exception to mining): at m = 1 (decode) and m = k + 1 (speculative
// verify) a GEMM is a stream over the weights, and cuBLASLt leaves HBM bandwidth on the table
// there (an H200 probe: Qwen3-4B qkv n 6144 k 2560 at m = 1, 11.33 us through cuBLAS vs 8.40 us
// for a PDL GEMV), plus it cannot start its weight loads before the previous kernel ends.
//
// Contract, kern_gemv_bf16(a, w, c, m, n, k):
//   a bf16 [m, k] row-major, w bf16 [n, k] row-major (one row per output column), c bf16
//   [m, n] row-major; f32 accumulation, c rounded to nearest even.  k % 8 == 0; a and w
//   16-byte aligned (rows are k elements, so every row is too); c 2-byte aligned.
//   grid (ceil(n / 16), ceil(m / 8), 1), block (32 * NW, 1, 1) with 1 <= NW <= 16 warps
//   (another block shape, k % 8 != 0 or a misaligned a / w traps); no dynamic shared memory.
//   Any m >= 1 is correct (grid.y blocks of 8 rows each re-read W).
//   Nothing outside a[0 .. m*k), w[0 .. n*k) is read, nothing outside c[0 .. m*n) written.
//
// Shapes it is meant for (decode / verify GEMMs): Qwen3-4B qkv n 6144 k 2560, o 2560 x 4096,
// gate_up 19456 x 2560, down 2560 x 9728, lm_head 151936 x 2560; SmolLM2-135M qkv 960 x 576,
// o 576 x 576, gate_up 3072 x 576, down 576 x 1536, lm_head 49152 x 576 (and the unmerged
// q / k / v / gate / up rows of the verify program).
//
// Design.  Block (x, y) owns the 16 output columns n0 = 16x .. n0 + 15 (W rows) and the 8 rows
// m0 = 8y .. m0 + 7 of A; its NW warps split k in steps of 32 elements (warp w takes steps
// w, w + NW, w + 2 NW, ...).  A step is one 16 x 32 W tile times a 32 x 8 tile of A^T: two
// mma.sync.m16n8k16 (bf16 in, f32 accumulate), W as the 16-row operand, A as the 8-column
// one (rows of A beyond m are zeros).  Lane (g = lane / 4, t = lane % 4) loads 16 bytes
// (8 consecutive k) of W rows n0 + g and n0 + g + 8 and of A row m0 + g, all at k offset
// 32 s + 8 t: since k is summed over, any assignment of real k indices to the mma's k slots
// is correct as long as W and A agree, so the 16-byte vectors feed the fragments directly
// (no shared memory, no shuffles, no conversion).  W loads are ld.global.nc.L1::no_allocate
// with a 256-byte L2 fetch (W is never written by any program); a batch of kUnroll = 4 steps
// is in flight per warp: 8 W + 4 A 16-byte loads per thread, 4 KB of W per warp.  Two accumulator sets (the two mmas of a
// step) halve the mma dependency chain.  The warps' partial tiles are summed through shared
// memory in warp order: deterministic, no atomics, the same bits on every launch with the
// same block size (each C element is its own dot product: a row's result does not depend on
// m or on the other rows).
//
// Two fused variants share the main loop (kern-gen applies them with --gemm gemv; the
// reason for each is the launches it saves, docs/measurements.md issue 16):
//   kern_gemv_silu_bf16(a, w, c, m, n, k): w bf16 [2n, k] = [gate; up] rows (the merged
//     gate_up weight), c bf16 [m, n] = silu(a.Wg^T) * (a.Wu^T).  Block x computes gate
//     columns 16x .. 16x + 15 and the same up columns (two 16-row W tiles per step).  Each
//     dot product is rounded to bf16 first (the bits the separate GEMM would have stored),
//     then silu(g) * u is computed in f32 and rounded once: it replaces a gate_up GEMM and the
//     captured SiLU*mul kernel (decode), or two GEMMs and that kernel (verify, draft).
//   kern_gemv_split3_bf16(a, w, c0, c1, c2, m, n0, n1, n2, k): w [n0 + n1 + n2, k] (the
//     merged qkv weight), output column j goes to c0 [m, n0] (j < n0), c1 [m, n1] or
//     c2 [m, n2], each with its own row stride: one launch for the q, k and v GEMMs of a
//     many-row program whose captured readers expect unmerged [rows, n_part] outputs.
//     n0 and n1 are multiples of 16 (a block's columns lie in one part), else it traps.
//   kern_gemv_acc_bf16(a, w, c, m, n, k): c [m, n] += a . w^T in place (the interface of
//     `extern:cublaslt_bf16_tn_acc`, beta = 1): each dot product in f32 plus the old c
//     element in f32, rounded once, as cuBLASLt's D = A.B + C.  DSpark's tap projections
//     (4 or 8 accumulating GEMMs a verify) and its Markov head (one a draft row).
//   kern_gemv_et_bf16(a, w, c, m, n, k): kern_gemv_bf16's contract and bits; it lets its
//     dependents launch right after its grid-dependency wait instead of after its main loop.
//     kern-gen puts it before a step that reads before its own wait (the decode attention,
//     attn_decode_cluster.cu: its old keys then load while this GEMV streams W;
//     kern_gen/llama/pdl_order.py).  Every other GEMV keeps the late trigger: triggering all
//     of them early gained nothing in decode and slowed the DSpark round (H100, session 25:
//     4.597 -> 4.646 ms, docs/measurements.md).
//   kern_gemv_silu_et_bf16: kern_gemv_silu_bf16's contract and bits, triggering right after
//     its wait.  kern-gen gives it (and kern_gemv_et_bf16) to a decode GEMV whose weight is
//     small enough to be latency-bound (kern_gen/llama/pdl_order.py small_early_triggers):
//     the next GEMV then launches and streams its first W batch while this one runs.
//   All compute every dot product exactly as kern_gemv_bf16 with the same NW does.
//
// The RMSNorm variants that share this main loop are in gemv_norm.cu (ABI.md 4e).
//
// Programmatic dependent launch: the first batch of W is requested before
// `griddepcontrol.wait` (weights are never written, so reading them while the previous kernel
// still runs is safe; gemv_core.cuh ld_w_first says why it is a coherent load);
// A is read and C written only after it; `launch_dependents` follows the main loop.  Both are
// no-ops without PDL.
#include "gemv_core.cuh"

template <bool kEarly>
__device__ __forceinline__ void gemv_plain(const __nv_bfloat16* a,
                                           const __nv_bfloat16* __restrict__ w,
                                           __nv_bfloat16* c, int m, int n, int k) {
    __shared__ float red[kMaxWarps][1][kRows][kCols];
    check_launch(a, w, k);
    const int n0 = blockIdx.x * kCols, m0 = blockIdx.y * kRows;
    if (n0 >= n || m0 >= m) return;                // block-uniform
    const int base[1] = {n0}, lim[1] = {n};
    gemv_tiles<1, NoNorm, kEarly>(a, w, m, k, base, lim, m0, red, NoNorm{});
    store_plain(red, c, m, n, m0, n0);
    KERN_TL_RECORD(w);
}

extern "C" __global__ void KERN_GEMV_BOUNDS_T1
kern_gemv_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
               __nv_bfloat16* c, int m, int n, int k) {
    gemv_plain<false>(a, w, c, m, n, k);
}

extern "C" __global__ void KERN_GEMV_BOUNDS_T1
kern_gemv_et_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                  __nv_bfloat16* c, int m, int n, int k) {
    gemv_plain<true>(a, w, c, m, n, k);
}

template <bool kEarly>
__device__ __forceinline__ void gemv_silu(const __nv_bfloat16* a,
                                          const __nv_bfloat16* __restrict__ w,
                                          __nv_bfloat16* c, int m, int n, int k) {
    __shared__ float red[kMaxWarps][2][kRows][kCols];
    check_launch(a, w, k);
    const int n0 = blockIdx.x * kCols, m0 = blockIdx.y * kRows;
    if (n0 >= n || m0 >= m) return;                // block-uniform
    // gate rows n0 .. (below n), up rows n + n0 .. (below 2n)
    const int base[2] = {n0, n + n0}, lim[2] = {n, 2 * n};
    gemv_tiles<2, NoNorm, kEarly>(a, w, m, k, base, lim, m0, red, NoNorm{});
    store_silu(red, c, m, n, m0, n0);
    KERN_TL_RECORD(w);
}

extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
kern_gemv_silu_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                    __nv_bfloat16* c, int m, int n, int k) {
    gemv_silu<false>(a, w, c, m, n, k);
}

extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
kern_gemv_silu_et_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                       __nv_bfloat16* c, int m, int n, int k) {
    gemv_silu<true>(a, w, c, m, n, k);
}

extern "C" __global__ void KERN_GEMV_BOUNDS_T1
kern_gemv_split3_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                      __nv_bfloat16* c0, __nv_bfloat16* c1, __nv_bfloat16* c2, int m,
                      int n0, int n1, int n2, int k) {
    __shared__ float red[kMaxWarps][1][kRows][kCols];
    check_launch(a, w, k);
    if ((n0 % kCols) != 0 || (n1 % kCols) != 0) __trap();
    const int n = n0 + n1 + n2;
    const int j0 = blockIdx.x * kCols, m0 = blockIdx.y * kRows;
    if (j0 >= n || m0 >= m) return;                // block-uniform
    const int base[1] = {j0}, lim[1] = {n};
    gemv_tiles<1>(a, w, m, k, base, lim, m0, red, NoNorm{});
    // the part this block's 16 columns lie in (block-uniform)
    __nv_bfloat16* c = j0 < n0 ? c0 : (j0 < n0 + n1 ? c1 : c2);
    const int start = j0 < n0 ? 0 : (j0 < n0 + n1 ? n0 : n0 + n1);
    const int width = j0 < n0 ? n0 : (j0 < n0 + n1 ? n1 : n2);
    for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) {
        const int mi = i / kCols, col = i % kCols;
        if (m0 + mi < m && j0 + col < n) {
            c[(size_t)(m0 + mi) * width + (j0 - start) + col] = __float2bfloat16_rn(warp_sum<1>(red, 0, mi, col));
        }
    }
}

// c[m, n] += a[m, k] . w[n, k]^T: each c element is read and written by the one thread that
// owns it, after the block's dot product is complete (in place is safe).
extern "C" __global__ void KERN_GEMV_BOUNDS_T1
kern_gemv_acc_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                   __nv_bfloat16* c, int m, int n, int k) {
    __shared__ float red[kMaxWarps][1][kRows][kCols];
    check_launch(a, w, k);
    const int n0 = blockIdx.x * kCols, m0 = blockIdx.y * kRows;
    if (n0 >= n || m0 >= m) return;                // block-uniform
    const int base[1] = {n0}, lim[1] = {n};
    gemv_tiles<1>(a, w, m, k, base, lim, m0, red, NoNorm{});
    for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) {
        const int mi = i / kCols, col = i % kCols;
        const float s = warp_sum<1>(red, 0, mi, col);
        if (m0 + mi < m && n0 + col < n) {
            __nv_bfloat16* o = c + (size_t)(m0 + mi) * n + n0 + col;
            *o = __float2bfloat16_rn(s + __bfloat162float(*o));
        }
    }
}
