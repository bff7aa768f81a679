// kern own kernels: the few-row GEMV with k split over a thread-block cluster (ABI.md 4f;
// `kern-gen --gemm splitk` picks it per shape, kern_gen.llama.gemm_splitk).  The same
// interfaces as gemv.cu's kern_gemv_bf16 / kern_gemv_silu_bf16:
//   kern_gemv_sk{S}_bf16(a, w, c, m, n, k):       c [m, n] = a [m, k] . w [n, k]^T
//   kern_gemv_silu_sk{S}_bf16(a, w, c, m, n, k):  c [m, n] = silu(a . Wg^T) * (a . Wu^T),
//                                                 w [2n, k] = [gate; up]
// with S in {2, 4, 8}: grid (ceil(n / 16), ceil(m / 8), S), block (32 * NW, 1, 1), NW <= 16,
// compiled cluster (1, 1, S) (no launch attribute needed); k % 8 == 0 and a, w 16-byte
// aligned as gemv.cu, else trap.
//
// Why: gemv.cu gives a block 16 columns times the whole of k, so a weight with few columns
// and a long k is few, large blocks.  Qwen3-4B o_proj (2560 x 4096) and down_proj
// (2560 x 9728) are 160 blocks on 132 SMs: 28 SMs stream a second block while the rest sit
// idle.  Cutting k in S parts makes 160 S blocks of 1/S the bytes each, so every SM streams
// about the same share.
//
// Design: block z of a cluster sums k steps [z P, (z + 1) P) with P = ceil(steps / S) (steps
// of 32 elements), through gemv.cu's main loop (gemv_core.cuh, ld = k); the warps' partials
// are summed in warp order into the block's part tile; after a cluster barrier rank 0 reads
// the S part tiles over distributed shared memory, adds them in rank order (deterministic:
// the same bits on every launch of the same grid and block) and stores as gemv.cu does (the
// SiLU variant rounds g and u to bf16 first).  A second barrier keeps the other ranks' shared
// memory alive until rank 0 has read it.  The sums differ from gemv.cu's in order only.
//
// PDL as gemv.cu: W's first batch requested before griddepcontrol.wait (gemv_core.cuh
// ld_w_first), launch_dependents after the main loop.
#include <cooperative_groups.h>

#include "gemv_core.cuh"

namespace {

namespace cg = cooperative_groups;

template <int S, int T, bool kSilu>
__device__ __forceinline__ void gemv_splitk(const __nv_bfloat16* a,
                                            const __nv_bfloat16* __restrict__ w,
                                            __nv_bfloat16* c, int m, int n, int k) {
    __shared__ float red[kMaxWarps][T][kRows][kCols];
    __shared__ float part[T][kRows][kCols];
    check_launch(a, w, k);
    cg::cluster_group cluster = cg::this_cluster();
    if (gridDim.z != S) __trap();
    const int n0 = blockIdx.x * kCols, m0 = blockIdx.y * kRows;
    if (n0 >= n || m0 >= m) return;                // cluster-uniform (the cluster spans z)
    const int steps = (k + kStep - 1) / kStep;
    const int per = (steps + S - 1) / S;
    const int k0 = min(k, (int)blockIdx.z * per * kStep);
    const int k1 = min(k, k0 + per * kStep);
    // gate rows n0 .. (below n) and, for the SiLU variant, up rows n + n0 .. (below 2n)
    int base[T], lim[T];
    base[0] = n0;
    lim[0] = n;
    if constexpr (T == 2) {
        base[1] = n + n0;
        lim[1] = 2 * n;
    }
    gemv_tiles_ld<T>(a + k0, w + k0, m, k1 - k0, k, base, lim, m0, red, NoNorm{});
    for (int i = threadIdx.x; i < T * kRows * kCols; i += blockDim.x) {
        const int t = i / (kRows * kCols), mi = (i / kCols) % kRows, col = i % kCols;
        part[t][mi][col] = warp_sum<T>(red, t, mi, col);
    }
    cluster.sync();
    if (cluster.block_rank() == 0) {
        const auto sum = [&](int t, int mi, int col) {
            float s = part[t][mi][col];
#pragma unroll
            for (int r = 1; r < S; ++r) {
                s += cluster.map_shared_rank(&part[0][0][0], r)[(t * kRows + mi) * kCols + col];
            }
            return s;
        };
        if constexpr (kSilu) {
            store_silu_by(sum, c, m, n, m0, n0);
        } else {
            store_plain_by(sum, c, m, n, m0, n0);
        }
    }
    cluster.sync();
}

}  // namespace

#define KERN_GEMV_SPLITK(S)                                                                  \
    extern "C" __global__ void __cluster_dims__(1, 1, S) KERN_GEMV_BOUNDS_T1                \
    kern_gemv_sk##S##_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,     \
                           __nv_bfloat16* c, int m, int n, int k) {                         \
        gemv_splitk<S, 1, false>(a, w, c, m, n, k);                                          \
    }                                                                                        \
    extern "C" __global__ void __cluster_dims__(1, 1, S) __launch_bounds__(kMaxWarps * 32)  \
    kern_gemv_silu_sk##S##_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,\
                                __nv_bfloat16* c, int m, int n, int k) {                    \
        gemv_splitk<S, 2, true>(a, w, c, m, n, k);                                           \
    }

KERN_GEMV_SPLITK(2)
KERN_GEMV_SPLITK(4)
KERN_GEMV_SPLITK(8)
