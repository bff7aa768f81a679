// kern own kernels: the default decode attention (kern-gen --attention split), two launches
// per call.  The one-launch variant (attn_decode.cu, --attention one-launch) merges the splits
// in the last block to arrive; on the H200 it measured 4-7 us slower per layer (issue 16,
// docs/measurements.md), so this pair stays the default.  ABI.md 3a.
//
// kern own kernels: split-KV GQA attention over a paged KV pool, few query rows per
// sequence (decode, batched decode, verify).
//
// Paged pool: key j of row t lives in slot
//   block_table[t * table_stride + (j >> 4)] * kPageTokens + (j & 15)
// (pages of kPageTokens = 16 slots; the caller contract's PAGE_TOKENS).
//
// Step 1, kern_attn_decode_partial_bf16_d{64,128}: grid (n_kv_heads, S, tokens), block (128).
//   Row t sees kv_len = kv_lens[t] >= 1 keys (read from device memory), j = 0 .. kv_len-1.
//   The row uses A = active_splits(kv_len, S, s_min, tokens) of the S grid slices (the split count
//   follows the context: at least s_min, one more per kKeysPerSplit keys, at most S); block
//   (hk, s, t) with s < A handles every query head of kv head hk over keys
//   [s*chunk, min((s+1)*chunk, kv_len)), chunk = ceil(kv_len / A), and writes the split's
//   running max m (log2 domain), sum l and unnormalised accumulator to f32 scratch; blocks
//   with s >= A return at once.
// Step 2, kern_attn_decode_reduce_bf16_d{64,128}: grid (n_q_heads, tokens), block (D): merges
//   the A splits of its row (same formula) and writes out[t, h, :] as bf16.
//
// Scratch layout (private to the impl, f32):
//   part_ml [tokens, n_q_heads, S, 2]  (m, l)
//   part_acc[tokens, n_q_heads, S, D]
#include "attn_core.cuh"

namespace {



template <int D>
__device__ __forceinline__ void decode_partial(
    const __nv_bfloat16* __restrict__ q,
    const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache,
    const int* __restrict__ kv_lens, const int* __restrict__ block_table,
    float* __restrict__ part_ml, float* __restrict__ part_acc,
    int q_row_stride,
    int64_t k_stride_slot, int64_t k_stride_head,
    int64_t v_stride_slot, int64_t v_stride_head,
    int n_q_heads, int n_kv_heads, float scale, int s_min, int table_stride)
{
    constexpr int LPK = D / 8;
    constexpr int NG = kThreads / LPK;
    __shared__ float sm_m[NG * kMaxG];
    __shared__ float sm_l[NG * kMaxG];
    __shared__ float sm_acc[NG * kMaxG * D];

    const int hk = blockIdx.x;
    const int split = blockIdx.y, splits = gridDim.y;   // splits: the scratch row stride
    const int t = blockIdx.z;
    // PDL: wait for the previous grid before the first global access (ABI.md, "PDL")
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const int kv_len = kv_lens[t];
    const int active = active_splits(kv_len, splits, s_min, gridDim.z);
    if (split >= active) return;
    const int chunk = (kv_len + active - 1) / active;
    const int k_begin = min(split * chunk, kv_len);
    const int k_end = min(k_begin + chunk, kv_len);
    const int group = n_q_heads / n_kv_heads;
    const float scale_log2 = scale * kLog2e;
    const __nv_bfloat16* kp = k_cache + (int64_t)hk * k_stride_head;
    const __nv_bfloat16* vp = v_cache + (int64_t)hk * v_stride_head;
    const int* table = block_table + (int64_t)t * table_stride;

    for (int g0 = 0; g0 < group; g0 += kMaxG) {
        const int qh0 = hk * group + g0;
        const int G = min(kMaxG, group - g0);
#define KERN_PASS(GG)                                                                     \
        decode_pass<D, GG>(q, q_row_stride, kp, vp, table, k_stride_slot, v_stride_slot,   \
                           t, qh0, n_q_heads, split, splits, k_begin, k_end, scale_log2,   \
                           nullptr, part_ml, part_acc, sm_m, sm_l, sm_acc)
        switch (G) {
            case 1: KERN_PASS(1); break;
            case 2: KERN_PASS(2); break;
            case 3: KERN_PASS(3); break;
            default: KERN_PASS(4); break;
        }
#undef KERN_PASS
    }
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

constexpr int kMaxSplits = 256;   // decode_reduce keeps one weight per split in shared memory


// Block of D threads (D = 64 or 128: 2 or 4 whole warps). The splits' (m, l) are read once,
// in parallel (thread s reads split s), their weights exp2(m_s - M) kept in shared memory;
// then each thread sums its dimension over the splits with loads that do not depend on each
// other (the old version reloaded m_s and branched on it per split, serialising the loads:
// 5.0 us for 9 heads x 32 splits on the H200, most of the time of a one-token decode layer's
// attention).
template <int D>
__device__ __forceinline__ void decode_reduce(
    const float* __restrict__ part_ml, const float* __restrict__ part_acc,
    const int* __restrict__ kv_lens, __nv_bfloat16* __restrict__ out, int n_q_heads,
    int grid_splits, int s_min)
{
    constexpr int kWarps = D / 32;
    __shared__ float sw[kMaxSplits];
    __shared__ float red[kWarps];
    const int h = blockIdx.x, t = blockIdx.y, d = threadIdx.x;
    const int lane = d % 32, warp = d / 32;
    const int64_t row0 = ((int64_t)t * n_q_heads + h) * grid_splits;
    if (grid_splits > kMaxSplits) __trap();   // ABI.md: S <= 256
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const int splits = active_splits(kv_lens[t], grid_splits, s_min, gridDim.y);

    float m = -CUDART_INF_F;
    for (int s = d; s < splits; s += D) m = fmaxf(m, part_ml[(row0 + s) * 2]);
    m = warp_max(m);
    if (lane == 0) red[warp] = m;
    __syncthreads();
    float M = red[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) M = fmaxf(M, red[w]);
    __syncthreads();                     // red is reused for the sum below

    float l = 0.f;
    for (int s = d; s < splits; s += D) {
        const float ms = part_ml[(row0 + s) * 2];
        const float w = (ms == -CUDART_INF_F) ? 0.f : exp2f(ms - M);   // empty split: 0
        sw[s] = w;
        l = fmaf(part_ml[(row0 + s) * 2 + 1], w, l);
    }
    l = warp_sum(l);
    if (lane == 0) red[warp] = l;
    __syncthreads();
    float L = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) L += red[w];

    const float* acc = part_acc + row0 * D + d;
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
    int s = 0;
    for (; s + 4 <= splits; s += 4) {
        a0 = fmaf(acc[(int64_t)(s + 0) * D], sw[s + 0], a0);
        a1 = fmaf(acc[(int64_t)(s + 1) * D], sw[s + 1], a1);
        a2 = fmaf(acc[(int64_t)(s + 2) * D], sw[s + 2], a2);
        a3 = fmaf(acc[(int64_t)(s + 3) * D], sw[s + 3], a3);
    }
    for (; s < splits; ++s) a0 = fmaf(acc[(int64_t)s * D], sw[s], a0);
    out[((int64_t)t * n_q_heads + h) * D + d] = __float2bfloat16(((a0 + a1) + (a2 + a3)) / L);
}

}  // namespace

#define KERN_DECODE_SYMBOLS(D)                                                            \
extern "C" __global__ void __launch_bounds__(kThreads)                                   \
kern_attn_decode_partial_bf16_d##D(                                                       \
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,       \
    const __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ kv_lens,           \
    const int* __restrict__ block_table, float* __restrict__ part_ml,                     \
    float* __restrict__ part_acc, int q_row_stride, int64_t k_stride_slot,                \
    int64_t k_stride_head, int64_t v_stride_slot, int64_t v_stride_head, int n_q_heads,   \
    int n_kv_heads, float scale, int s_min, int table_stride)                             \
{                                                                                         \
    decode_partial<D>(q, k_cache, v_cache, kv_lens, block_table, part_ml, part_acc,       \
                      q_row_stride, k_stride_slot, k_stride_head, v_stride_slot,          \
                      v_stride_head, n_q_heads, n_kv_heads, scale, s_min, table_stride);  \
}                                                                                         \
extern "C" __global__ void __launch_bounds__(D)                                          \
kern_attn_decode_reduce_bf16_d##D(                                                        \
    const float* __restrict__ part_ml, const float* __restrict__ part_acc,                \
    const int* __restrict__ kv_lens, __nv_bfloat16* __restrict__ out, int n_q_heads,      \
    int splits, int s_min)                                                                \
{                                                                                         \
    decode_reduce<D>(part_ml, part_acc, kv_lens, out, n_q_heads, splits, s_min);          \
}

KERN_DECODE_SYMBOLS(64)
KERN_DECODE_SYMBOLS(128)
