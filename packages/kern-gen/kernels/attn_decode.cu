// kern own kernels: split-KV GQA attention over a paged KV pool, few query rows per
// sequence (decode, batched decode, verify), in one launch.  See ABI.md 3a.
//
// Paged pool: key j of row t lives in slot
//   block_table[t * table_stride + (j >> 4)] * kPageTokens + (j & 15)
// (pages of kPageTokens = 16 slots; the caller contract's PAGE_TOKENS).
//
// kern_attn_decode_bf16_d{64,128}: grid (n_kv_heads, S, tokens), block (128).
//   Row t sees kv_len = kv_lens[t] >= 1 keys (read from device memory), j = 0 .. kv_len-1.
//   The row uses A = active_splits(kv_len, S, s_min, tokens) of the S grid slices (the split count
//   follows the context: at least s_min, one more per kKeysPerSplit keys, at most S); block
//   (hk, s, t) with s < A handles every query head of kv head hk over keys
//   [s*chunk, min((s+1)*chunk, kv_len)), chunk = ceil(kv_len / A); blocks with s >= A return
//   at once.
//   A == 1: the block normalises its result and writes out[t, h, :] (no scratch is touched).
//   A > 1: the block writes the split's running max m (log2 domain), sum l and unnormalised
//   accumulator to f32 scratch, then counts itself in counters[t * n_kv_heads + hk]; the block
//   that arrives last (it sees A - 1 there) merges the A splits in split order 0 .. A-1 with
//   the arithmetic of the two-launch reduce (attn_decode_split.cu), writes
//   out[t, h, :] as bf16 and sets the counter back to 0.  Which block arrives last does not
//   change a bit of the result.
//
// Scratch layout (private to the impl):
//   part_ml [tokens, n_q_heads, S, 2]  f32 (m, l)
//   part_acc[tokens, n_q_heads, S, D]  f32
//   counters[tokens, n_kv_heads]       u32: 0 before every launch, 0 again after it (the
//                                      runtime zero-fills the arena at load; the last block of
//                                      each (row, kv head) resets its counter)
//
// Programmatic dependent launch: griddepcontrol.wait before the first global access,
// griddepcontrol.launch_dependents once the keys are read (both no-ops without PDL).
#include "attn_core.cuh"

namespace {


constexpr int kMaxSplits = 256;   // the merge keeps one weight per (head, split) in shared memory



// The merge of the A splits of query heads qh0 .. qh0 + G - 1 of row t, by the last block of
// (t, kv head), with the former reduce kernel's arithmetic: that kernel ran D threads (D / 32
// warps) per head; here "lane" v = idx % D of head idx / D plays its thread v (whole warps,
// as G * D is a multiple of 32), so the max, the weights, the row sum l (per thread over
// splits v, v + D, ..., then the warp butterfly, then the warps in order) and the four
// accumulator chains over s = 0 .. A-1 are the same operations in the same order.  Scratch
// written by the other blocks of this launch is read through L2 (__ldcg).
template <int D, int G>
__device__ __forceinline__ void merge_pass(
    const float* __restrict__ part_ml, const float* __restrict__ part_acc,
    __nv_bfloat16* __restrict__ out, int t, int qh0, int n_q_heads, int splits, int active,
    float* sw, float* red_m, float* red_l)
{
    constexpr int kWarpsD = D / 32;                          // warps of the former reduce block
    constexpr int NO = (G * D + kThreads - 1) / kThreads;   // outputs per thread
    const int tid = threadIdx.x, lane = tid % 32;
    const int64_t head0 = (int64_t)t * n_q_heads + qh0;     // (row, head) index of head 0

    for (int idx = tid; idx < G * D; idx += kThreads) {
        const int h = idx / D, v = idx % D;
        const float2* ml = reinterpret_cast<const float2*>(part_ml) + (head0 + h) * splits;
        float m = -CUDART_INF_F;
        for (int s = v; s < active; s += D) m = fmaxf(m, __ldcg(ml + s).x);
        m = warp_max(m);
        if (lane == 0) red_m[h * kWarpsD + v / 32] = m;
    }
    __syncthreads();
    for (int idx = tid; idx < G * D; idx += kThreads) {
        const int h = idx / D, v = idx % D;
        const float2* ml = reinterpret_cast<const float2*>(part_ml) + (head0 + h) * splits;
        float M = red_m[h * kWarpsD];
#pragma unroll
        for (int w = 1; w < kWarpsD; ++w) M = fmaxf(M, red_m[h * kWarpsD + w]);
        float l = 0.f;
        for (int s = v; s < active; s += D) {
            const float2 p = __ldcg(ml + s);
            const float w = (p.x == -CUDART_INF_F) ? 0.f : exp2f(p.x - M);   // empty split: 0
            sw[h * kMaxSplits + s] = w;
            l = fmaf(p.y, w, l);
        }
        l = warp_sum(l);
        if (lane == 0) red_l[h * kWarpsD + v / 32] = l;
    }
    __syncthreads();

    // out[h, d] = ((a0 + a1) + (a2 + a3)) / L, a_k summing splits s = k (mod 4) below the last
    // whole group of four, a0 the rest; all NO outputs of a thread advance together.
    const float* acc[NO];
    const float* w[NO];
    bool mine[NO];                 // warp-uniform: G * D is a multiple of 32
    float a[NO][4];
#pragma unroll
    for (int k = 0; k < NO; ++k) {
        const int idx = min(tid + k * kThreads, G * D - 1);
        mine[k] = tid + k * kThreads < G * D;
        acc[k] = part_acc + (head0 + idx / D) * splits * D + idx % D;
        w[k] = sw + (idx / D) * kMaxSplits;
        a[k][0] = a[k][1] = a[k][2] = a[k][3] = 0.f;
    }
    int s = 0;
    for (; s + 4 <= active; s += 4) {
#pragma unroll
        for (int k = 0; k < NO; ++k) {
            if (!mine[k]) continue;
#pragma unroll
            for (int u = 0; u < 4; ++u)
                a[k][u] = fmaf(__ldcg(acc[k] + (int64_t)(s + u) * D), w[k][s + u], a[k][u]);
        }
    }
    for (; s < active; ++s) {
#pragma unroll
        for (int k = 0; k < NO; ++k)
            if (mine[k]) a[k][0] = fmaf(__ldcg(acc[k] + (int64_t)s * D), w[k][s], a[k][0]);
    }
#pragma unroll
    for (int k = 0; k < NO; ++k) {
        const int idx = tid + k * kThreads;
        if (!mine[k]) break;
        const int h = idx / D;
        float L = 0.f;
#pragma unroll
        for (int ww = 0; ww < kWarpsD; ++ww) L += red_l[h * kWarpsD + ww];
        out[(head0 + h) * D + idx % D] =
            __float2bfloat16(((a[k][0] + a[k][1]) + (a[k][2] + a[k][3])) / L);
    }
    __syncthreads();   // sw and red are reused by the next group of heads
}

// G (1..kMaxG) as a template argument: a switch over the heads of one pass.
#define KERN_BY_G(G, CALL)                    \
    switch (G) {                              \
        case 1: { constexpr int GG = 1; CALL; } break; \
        case 2: { constexpr int GG = 2; CALL; } break; \
        case 3: { constexpr int GG = 3; CALL; } break; \
        default: { constexpr int GG = 4; CALL; } break; \
    }

template <int D>
__device__ __forceinline__ void decode(
    const __nv_bfloat16* __restrict__ q,
    const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache,
    const int* __restrict__ kv_lens, const int* __restrict__ block_table,
    __nv_bfloat16* __restrict__ out,
    float* __restrict__ part_ml, float* __restrict__ part_acc,
    unsigned int* __restrict__ counters,
    int q_row_stride,
    int64_t k_stride_slot, int64_t k_stride_head,
    int64_t v_stride_slot, int64_t v_stride_head,
    int n_q_heads, int n_kv_heads, float scale, int s_min, int table_stride)
{
    constexpr int LPK = D / 8;
    constexpr int NG = kThreads / LPK;
    static_assert(kMaxG * kMaxSplits <= NG * kMaxG * D && kMaxG * D / 32 <= NG * kMaxG,
                  "the merge's weights and partial sums fit the pass's shared memory");
    __shared__ float sm_m[NG * kMaxG];
    __shared__ float sm_l[NG * kMaxG];
    __shared__ float sm_acc[NG * kMaxG * D];
    __shared__ int sm_last;

    grid_dependency_wait();
    const int hk = blockIdx.x;
    const int split = blockIdx.y, splits = gridDim.y;   // splits: the scratch row stride
    const int t = blockIdx.z;
    if (splits > kMaxSplits) __trap();   // ABI.md: S <= 256
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
    __nv_bfloat16* direct = active == 1 ? out : nullptr;

    for (int g0 = 0; g0 < group; g0 += kMaxG) {
        const int qh0 = hk * group + g0;
        KERN_BY_G(min(kMaxG, group - g0),
                  (decode_pass<D, GG>(q, q_row_stride, kp, vp, table, k_stride_slot,
                                      v_stride_slot, t, qh0, n_q_heads, split, splits, k_begin,
                                      k_end, scale_log2, direct, part_ml, part_acc, sm_m, sm_l,
                                      sm_acc)))
    }
    launch_dependents();
    if (active == 1) return;

    // Count this split in; the block that makes the count A merges.  Every thread's scratch
    // writes are made visible (fence) before thread 0's increment, and thread 0's fence after
    // the increment orders the other blocks' writes before this block's reads.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int* c = counters + (int64_t)t * n_kv_heads + hk;
        const bool last = atomicAdd(c, 1u) == (unsigned int)(active - 1);
        if (last) {
            atomicExch(c, 0u);   // every split of this launch has counted: ready for the next
            __threadfence();
        }
        sm_last = last;
    }
    __syncthreads();
    if (!sm_last) return;
    for (int g0 = 0; g0 < group; g0 += kMaxG) {
        const int qh0 = hk * group + g0;
        KERN_BY_G(min(kMaxG, group - g0),
                  (merge_pass<D, GG>(part_ml, part_acc, out, t, qh0, n_q_heads, splits, active,
                                     sm_acc, sm_m, sm_l)))
    }
}

#undef KERN_BY_G

}  // namespace

#define KERN_DECODE_SYMBOL(D)                                                             \
extern "C" __global__ void __launch_bounds__(kThreads, 3)                                \
kern_attn_decode_bf16_d##D(                                                               \
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,       \
    const __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ kv_lens,           \
    const int* __restrict__ block_table, __nv_bfloat16* __restrict__ out,                 \
    float* __restrict__ part_ml, float* __restrict__ part_acc,                            \
    unsigned int* __restrict__ counters, int q_row_stride, int64_t k_stride_slot,         \
    int64_t k_stride_head, int64_t v_stride_slot, int64_t v_stride_head, int n_q_heads,   \
    int n_kv_heads, float scale, int s_min, int table_stride)                             \
{                                                                                         \
    decode<D>(q, k_cache, v_cache, kv_lens, block_table, out, part_ml, part_acc,          \
              counters, q_row_stride, k_stride_slot, k_stride_head, v_stride_slot,        \
              v_stride_head, n_q_heads, n_kv_heads, scale, s_min, table_stride);          \
}

KERN_DECODE_SYMBOL(64)
KERN_DECODE_SYMBOL(128)
