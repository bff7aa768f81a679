// kern own kernels: the few-row GEMV with 8-column tiles (ABI.md 4h; kern-gen's choice
// for decode GEMVs whose 16-column tiles leave some SMs two blocks and most one).
//
// Why: the Qwen3-4B o (2560 x 4096) and down (2560 x 9728) GEMVs have 160 tiles of 16
// columns on 132 SMs; the 28 SMs with two blocks end their loop 1.5 / 2.3 us after the rest
// (probe_gemv_timeline.py, H100, docs/measurements.md session 28).  With 8 columns a tile and
// the same bytes per warp there are 320 blocks of half the work: at most three a SM against
// an average of 2.4, where 16-column tiles give two against 1.2.
//
// Contract, kern_gemv_h2_bf16(a, w, c, m, n, k): gemv.cu kern_gemv_bf16's operands, result
// layout, alignment and reads / writes, with k % 16 == 0 (else trap); grid (ceil(n / 8),
// ceil(m / 4), 1), block (32 * NW, 1, 1), 1 <= NW <= 16.  Block (x, y) computes columns
// 8x .. 8x + 7 of rows 4y .. 4y + 3 (meant for m = 1: decode).
//   The mma's 16-row operand holds each of the tile's 8 W rows twice, rows g and g + 8 its
// k halves [0, k/2) and [k/2, k); its 8 columns are the block's 4 A rows at each half
// (gemv_core.cuh kHalves).  Warp v sums the steps v, v + NW, ... of 32 elements of each half
// (two accumulators, as kern_gemv_bf16), the warps' partials are added in warp order per
// half, then the two halves (first + second) in f32; one rounding to bf16 at the store.
// Deterministic; the bits differ from kern_gemv_bf16's (another f32 sum order).
//   kern_gemv_silu_h2_bf16(a, w, c, m, n, k): gemv.cu kern_gemv_silu_bf16's contract (w the
// merged [2n, k] gate/up weight) on the same geometry: block x computes gate and up
// columns 8x .. 8x + 7; each dot product summed as above, rounded to bf16, then SiLU(g) * u
// in f32, rounded once.
//   The _et_ twins: the same contract and bits, launch_dependents right after the wait.
//
// PDL as gemv.cu: only W's first batch before griddepcontrol.wait.
#include "gemv_core.cuh"

namespace {

constexpr int kH2Cols = 8;   // output columns a block
constexpr int kH2Rows = 4;   // rows of A a block

// The f32 dot product of A row m0 + r with tile t's column col (gemv_core.cuh kHalves).
template <int T>
__device__ __forceinline__ float halves_sum(float (*red)[T][kRows][kCols], int t, int r,
                                            int col) {
    return warp_sum<T>(red, t, 2 * r, col) + warp_sum<T>(red, t, 2 * r + 1, col + 8);
}

// T = 1: the plain GEMV; T = 2: gate/up with the SiLU·mul epilogue (w is [2n, k]).
template <int T, bool kEarly>
__device__ __forceinline__ void gemv_h2(const __nv_bfloat16* a,
                                        const __nv_bfloat16* __restrict__ w,
                                        __nv_bfloat16* c, int m, int n, int k) {
    __shared__ float red[kMaxWarps][T][kRows][kCols];
    check_launch(a, w, k);
    if ((k & 15) != 0) __trap();
    const int n0 = blockIdx.x * kH2Cols, m0 = blockIdx.y * kH2Rows;
    if (n0 >= n || m0 >= m) return;                // block-uniform
    int base[T], lim[T];
    base[0] = n0;
    lim[0] = n;
    if constexpr (T == 2) {                        // up rows n + n0 .. (below 2n)
        base[1] = n + n0;
        lim[1] = 2 * n;
    }
    gemv_tiles_ld<T, NoNorm, kEarly, true>(a, w, m, k, k, base, lim, m0, red, NoNorm{});
    for (int i = threadIdx.x; i < kH2Rows * kH2Cols; i += blockDim.x) {
        const int r = i / kH2Cols, col = i % kH2Cols;
        if (m0 + r >= m || n0 + col >= n) continue;
        float v = halves_sum<T>(red, 0, r, col);
        if constexpr (T == 2) {
            const float gv = __bfloat162float(__float2bfloat16_rn(v));
            const float uv = __bfloat162float(__float2bfloat16_rn(halves_sum<T>(red, 1, r, col)));
            v = gv / (1.0f + __expf(-gv)) * uv;
        }
        c[(size_t)(m0 + r) * n + n0 + col] = __float2bfloat16_rn(v);
    }
    KERN_TL_RECORD(w);
}

}  // namespace

extern "C" __global__ void KERN_GEMV_BOUNDS_T1
kern_gemv_h2_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                  __nv_bfloat16* c, int m, int n, int k) {
    gemv_h2<1, false>(a, w, c, m, n, k);
}

extern "C" __global__ void KERN_GEMV_BOUNDS_T1
kern_gemv_h2_et_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                     __nv_bfloat16* c, int m, int n, int k) {
    gemv_h2<1, true>(a, w, c, m, n, k);
}

extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
kern_gemv_silu_h2_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                       __nv_bfloat16* c, int m, int n, int k) {
    gemv_h2<2, false>(a, w, c, m, n, k);
}

extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
kern_gemv_silu_h2_et_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                          __nv_bfloat16* c, int m, int n, int k) {
    gemv_h2<2, true>(a, w, c, m, n, k);
}
