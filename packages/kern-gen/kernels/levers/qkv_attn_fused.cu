// Issue 16 lever (a probe, not wired into kern-gen): the Qwen3 decode layer's qkv GEMV and its
// attention (q/k RMSNorm, rope, the K/V cache write, attention over the row's keys) as ONE
// launch.  The GEMV runs as kern_gemv_bf16 does (same tiles, same bits); after storing its 16
// columns each block counts itself in its kv head's counter, and the block that completes a
// kv head's 48 tiles (its G = 4 query heads, its k and its v: 32 + 8 + 8) does that kv head's
// attention alone, with the cluster kernel's code (attn_cluster_pass.cuh) at one split.
//
// Why: on the H200 the decode attention costs 5.12 us a layer in the step (kern-run bench
// --ablate, session 35), 0.184 ms of 2.449; the H100 timeline (session 31) puts ~0.8 us of it
// in the attention's grid-dependency wait after qkv's last store, ~1.5 in q ready and ~1.9 in
// the cluster's two barriers and merge.  Here there is no launch boundary and no cluster; the
// price is one atomic a block, the key pass at one split (ctx 144: 3 batches of 64 keys in a
// block instead of 18 keys in each of 8 blocks) and the attention's registers in every GEMV
// block.  probe_qkv_attn_fused.py measures whether that wins: the qkv -> attention -> o chain
// against the shipped kernels, contexts 144 and 1000.
//
// Contract, kern_qkv_attn_fused_bf16_d128(x, w, qkv, q_w, k_w, ang, slots, k_cache, v_cache,
// kv_lens, block_table, out, counters, hidden, kss, ksh, vss, vsh, n_q_heads, n_kv_heads,
// scale, table_stride, cache_len, eps), one row (decode, tokens = 1):
//   x bf16 [1, hidden], w bf16 [n, hidden] with n = (n_q_heads + 2 n_kv_heads) 128, qkv bf16
//   [1, n] (written: kern_gemv_bf16's bits), out bf16 [1, n_q_heads 128] (written), counters
//   u32 [n_kv_heads]: zero before the first launch, zero again after every launch.  The rest
//   as kern_attn_decode_cluster_rope_norm_bf16_d128's (ABI.md 3a‴) with t = 0: the q / k
//   norms and the rotation are norm_rope_warp's, the new key's K / V go to slots[0], and
//   key kv_lens[0] - 1 is that new key.  grid (n / 16, 1, 1), block (256, 1, 1).
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <math_constants.h>
#include <stdint.h>

// gemv_core.cuh and attn_core.cuh both define kUnroll (4 each) in an anonymous namespace.
namespace gemvk {
#include "gemv_core.cuh"
}
#include "attn_core.cuh"
#include "rope_core.cuh"

#define KERN_ATL(i) do {} while (0)
#define KERN_ATL_RECORD(tag) do {} while (0)
namespace cg = cooperative_groups;

namespace {
constexpr int kC = 1;            // one split: the completing block attends alone
constexpr int kHead = 128;
template <int D> struct Threads;
template <> struct Threads<128> { static constexpr int value = 256; };
}  // namespace

#include "attn_cluster_pass.cuh"

#ifndef KERN_FUSED_MIN_BLOCKS
#define KERN_FUSED_MIN_BLOCKS 1
#endif

extern "C" __global__ void __cluster_dims__(1, 1, 1)
__launch_bounds__(256, KERN_FUSED_MIN_BLOCKS)
kern_qkv_attn_fused_bf16_d128(
    const __nv_bfloat16* x, const __nv_bfloat16* __restrict__ w, __nv_bfloat16* qkv,
    const __nv_bfloat16* __restrict__ q_w, const __nv_bfloat16* __restrict__ k_w,
    const float* __restrict__ ang, const int64_t* __restrict__ slots,
    __nv_bfloat16* k_cache, __nv_bfloat16* v_cache, const int* __restrict__ kv_lens,
    const int* __restrict__ block_table, __nv_bfloat16* __restrict__ out, unsigned* counters,
    int hidden, int64_t kss, int64_t ksh, int64_t vss, int64_t vsh, int n_q_heads,
    int n_kv_heads, float scale, int table_stride, long long cache_len, float eps)
{
    constexpr int D = kHead;
    using gemvk::kCols;
    using gemvk::kRows;
    __shared__ float red[8][1][kRows][kCols];
    __shared__ Smem<D> sm;
    __shared__ __align__(16) __nv_bfloat16 row_s[(kMaxG + 2) * D];
    __shared__ __align__(16) __nv_bfloat16 q_s[kMaxG * D];
    __shared__ __align__(16) __nv_bfloat16 k_s[D];
    __shared__ __align__(16) __nv_bfloat16 v_s[D];
    __shared__ unsigned last;
    const int G = n_q_heads / n_kv_heads;
    const int nq = n_q_heads * D, nk = n_kv_heads * D, n = nq + 2 * nk;
    if (blockDim.x != 256 || G < 1 || G > kMaxG || G * n_kv_heads != n_q_heads ||
        (int)gridDim.x * kCols != n || gridDim.y != 1)
        __trap();
    gemvk::check_launch(x, w, hidden);
    const int n0 = blockIdx.x * kCols;
    {
        const int base[1] = {n0}, lim[1] = {n};
        gemvk::gemv_tiles<1, gemvk::NoNorm>(x, w, 1, hidden, base, lim, 0, red, gemvk::NoNorm{});
        gemvk::store_plain(red, qkv, 1, n, 0, n0);
    }
    // The tile's kv head: q columns [hk G D, (hk + 1) G D), k [nq + hk D, ...), v [nq + nk + hk D, ...).
    const int hk = n0 < nq ? n0 / (G * D) : (n0 < nq + nk ? (n0 - nq) / D : (n0 - nq - nk) / D);
    __threadfence();           // this block's qkv stores before its count
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned tiles = (G + 2) * D / kCols;
        last = atomicAdd(counters + hk, 1u) == tiles - 1;
        if (last) counters[hk] = 0;   // every tile of hk has counted: no other access this launch
    }
    __syncthreads();
    if (!last) return;
    __threadfence();

    // The kv head's q | k | v through L2 (other blocks wrote them) into shared memory.
    for (int i = threadIdx.x; i < (G + 2) * D / 8; i += 256) {
        const int e = i * 8;
        const __nv_bfloat16* src = e < G * D ? qkv + hk * G * D + e
                                 : (e < (G + 1) * D ? qkv + nq + hk * D + (e - G * D)
                                                    : qkv + nq + nk + hk * D + (e - (G + 1) * D));
        *reinterpret_cast<uint4*>(row_s + e) = __ldcg(reinterpret_cast<const uint4*>(src));
    }
    __syncthreads();
    const int kv_len = kv_lens[0], new_key = kv_len - 1;
    int64_t slot = slots[0];
    if (slot < 0) slot += cache_len;
    const bool store = slot >= 0 && slot < cache_len;
    __nv_bfloat16* kc = k_cache + slot * kss + hk * ksh;
    __nv_bfloat16* vc = v_cache + slot * vss + hk * vsh;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp <= G) {
        __nv_bfloat16 o[kRopeMaxPerLane];
        const bool is_q = warp < G;
        norm_rope_warp(row_s + warp * D, is_q ? q_w : k_w, ang, 0, 1, D, eps, o);
        __nv_bfloat16* dst = is_q ? q_s + warp * D : k_s;   // the new k also goes to the cache
#pragma unroll
        for (int i = 0; i < D / 32; ++i) dst[lane + 32 * i] = o[i];
        if (!is_q && store)
            for (int i = 0; i < D / 32; ++i) kc[lane + 32 * i] = o[i];
    } else if (warp == G + 1) {
        for (int d = lane; d < D; d += 32) {
            v_s[d] = row_s[(G + 1) * D + d];
            if (store) vc[d] = v_s[d];
        }
    }
    __syncthreads();
    const Pass a{q_s, k_cache + hk * ksh, v_cache + hk * vsh, block_table, kss, vss, 0, kv_len,
                 scale * kLog2e, new_key, k_s, v_s};
    const uint4 none[kUnroll] = {};
    attend_and_merge<D, false>(a, G, 0, out + (int64_t)hk * G * D, sm, none, none);
}
