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
#include <cuda_bf16.h>
#include <stdint.h>
#include <math_constants.h>

namespace {

constexpr int kThreads = 128;
constexpr int kMaxG = 4;     // query heads handled per pass over the keys
constexpr int kUnroll = 4;   // keys in flight per key group
constexpr float kLog2e = 1.4426950408889634f;
// Keys per split at long context: enough blocks to stream the cache near bandwidth (e.g. a
// 32k context of 8 kv heads gives 64 splits x 8 = 512 blocks of 512 keys).
constexpr int kKeysPerSplit = 512;
constexpr int kPageTokens = 16;  // slots per page of the KV pool (caller contract PAGE_TOKENS)
constexpr int kPageShift = 4;    // log2(kPageTokens)
static_assert(kPageTokens == 1 << kPageShift, "page size is a power of two");

// s_min is the fewest splits of a lone row (about one block per SM over the kv heads); with
// `rows` rows in the grid the rows already supply that parallelism, so a row's minimum drops
// to max(1, s_min / rows): a batch of B sequences gets long splits instead of B * s_min short
// ones (H200, 32q/8kv d128, B = 64 rows of 1024 keys: 180 us with 16 splits a row, 150 us
// this way; torch SDPA on the same data: 66 us).  One row (decode) is unchanged.
__device__ __forceinline__ int active_splits(int kv_len, int splits, int s_min, int rows) {
    const int floor_ = max(1, s_min / max(1, rows));
    const int want = (kv_len + kKeysPerSplit - 1) / kKeysPerSplit;
    return max(1, min(splits, max(floor_, want)));
}

__device__ __forceinline__ void bf16x8_to_f32(const uint4& w, float (&f)[8]) {
    const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        f[2 * k] = __uint_as_float(ws[k] << 16);
        f[2 * k + 1] = __uint_as_float(ws[k] & 0xffff0000u);
    }
}

// Page of each of this lane's kUnroll keys base + u*NG (0 for keys >= k_end, whose table
// entries are never read: a row's table is read only below ceil(kv_len / kPageTokens)).
template <int NG>
__device__ __forceinline__ void load_pages(int (&pg)[kUnroll], const int* __restrict__ table,
                                           int base, int k_end) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int key = base + u * NG;
        pg[u] = key < k_end ? table[key >> kPageShift] : 0;
    }
}

// Element offset of key `key` (in page `page`) in a cache of slot stride `stride`.
__device__ __forceinline__ int64_t slot_offset(int page, int key, int64_t stride) {
    return ((int64_t)page * kPageTokens + (key & (kPageTokens - 1))) * stride;
}

__device__ __forceinline__ uint4 ldg_nc(const __nv_bfloat16* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

constexpr int kMaxSplits = 256;   // the merge keeps one weight per (head, split) in shared memory

__device__ __forceinline__ void grid_dependency_wait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

__device__ __forceinline__ void launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;");
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

// D: head dim; G: query heads of this pass (1..kMaxG); first query head qh0; table: row t of
// the block table.  out != nullptr (A == 1): write the normalised result there; otherwise the
// split's (m, l, acc) to scratch.
template <int D, int G>
__device__ __forceinline__ void decode_pass(
    const __nv_bfloat16* __restrict__ q, int q_row_stride,
    const __nv_bfloat16* __restrict__ kp, const __nv_bfloat16* __restrict__ vp,
    const int* __restrict__ table, int64_t k_stride_slot, int64_t v_stride_slot,
    int t, int qh0, int n_q_heads, int split, int splits,
    int k_begin, int k_end, float scale_log2, __nv_bfloat16* __restrict__ out,
    float* __restrict__ part_ml, float* __restrict__ part_acc,
    float* sm_m, float* sm_l, float* sm_acc)
{
    constexpr int LPK = D / 8;              // lanes per key (8 dims each)
    constexpr int NG = kThreads / LPK;      // key groups per block
    const int tid = threadIdx.x;
    const int kg = tid / LPK;
    const int sub = tid % LPK;

    float qf[G][8];
#pragma unroll
    for (int h = 0; h < G; ++h) {
        const uint4 w = *reinterpret_cast<const uint4*>(
            q + (int64_t)t * q_row_stride + (int64_t)(qh0 + h) * D + sub * 8);
        bf16x8_to_f32(w, qf[h]);
#pragma unroll
        for (int j = 0; j < 8; ++j) qf[h][j] *= scale_log2;
    }
    float m[G], l[G], acc[G][8];
#pragma unroll
    for (int h = 0; h < G; ++h) {
        m[h] = -CUDART_INF_F;
        l[h] = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[h][j] = 0.f;
    }

    // The loop bound is block-uniform (warp shuffles below need every lane); a lane's keys
    // are it + u*NG + kg, masked when >= k_end.  The pages of the next iteration's keys are
    // loaded right after this iteration's K/V loads are issued, so the table lookup's
    // latency hides behind this iteration's math instead of delaying the K/V loads.
    int pg[kUnroll];
    load_pages<NG>(pg, table, k_begin + kg, k_end);
    for (int it = k_begin; it < k_end; it += NG * kUnroll) {
        const int base = it + kg;
        uint4 kr[kUnroll], vr[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int key = base + u * NG;
            if (key < k_end) {
                kr[u] = ldg_nc(kp + slot_offset(pg[u], key, k_stride_slot) + sub * 8);
                vr[u] = ldg_nc(vp + slot_offset(pg[u], key, v_stride_slot) + sub * 8);
            } else {
                kr[u] = make_uint4(0u, 0u, 0u, 0u);
                vr[u] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
        load_pages<NG>(pg, table, base + NG * kUnroll, k_end);
        float s[kUnroll][G];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            float kf[8];
            bf16x8_to_f32(kr[u], kf);
#pragma unroll
            for (int h = 0; h < G; ++h) {
                float d = 0.f;
#pragma unroll
                for (int j = 0; j < 8; ++j) d = fmaf(qf[h][j], kf[j], d);
#pragma unroll
                for (int off = LPK / 2; off > 0; off >>= 1)
                    d += __shfl_xor_sync(0xffffffffu, d, off);
                s[u][h] = (base + u * NG < k_end) ? d : -CUDART_INF_F;
            }
        }
#pragma unroll
        for (int h = 0; h < G; ++h) {
            float mx = s[0][h];
#pragma unroll
            for (int u = 1; u < kUnroll; ++u) mx = fmaxf(mx, s[u][h]);
            const float m_new = fmaxf(m[h], mx);
            // -inf when this key group has seen no valid key yet: keep everything at 0
            const float m_use = (m_new == -CUDART_INF_F) ? 0.f : m_new;
            const float corr = exp2f(m[h] - m_use);
            float p[kUnroll];
            float ps = 0.f;
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) { p[u] = exp2f(s[u][h] - m_use); ps += p[u]; }
            l[h] = l[h] * corr + ps;
            m[h] = m_new;
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[h][j] *= corr;
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                float vf[8];
                bf16x8_to_f32(vr[u], vf);
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[h][j] = fmaf(p[u], vf[j], acc[h][j]);
            }
        }
    }

    // merge the NG key groups of this block
#pragma unroll
    for (int h = 0; h < G; ++h) {
        if (sub == 0) { sm_m[kg * kMaxG + h] = m[h]; sm_l[kg * kMaxG + h] = l[h]; }
#pragma unroll
        for (int j = 0; j < 8; ++j) sm_acc[(kg * kMaxG + h) * D + sub * 8 + j] = acc[h][j];
    }
    __syncthreads();
    for (int idx = tid; idx < G * D; idx += kThreads) {
        const int h = idx / D, d = idx % D;
        float M = -CUDART_INF_F;
#pragma unroll 4
        for (int g = 0; g < NG; ++g) M = fmaxf(M, sm_m[g * kMaxG + h]);
        float a = 0.f, L = 0.f;
        if (M != -CUDART_INF_F) {
#pragma unroll 4
            for (int g = 0; g < NG; ++g) {
                const float mg = sm_m[g * kMaxG + h];
                const float w = (mg == -CUDART_INF_F) ? 0.f : exp2f(mg - M);
                a = fmaf(sm_acc[(g * kMaxG + h) * D + d], w, a);
                L = fmaf(sm_l[g * kMaxG + h], w, L);
            }
        }
        if (out != nullptr) {      // A == 1: the former reduce of one split is a / L
            out[((int64_t)t * n_q_heads + qh0 + h) * D + d] = __float2bfloat16(a / L);
            continue;
        }
        const int64_t row = ((int64_t)t * n_q_heads + qh0 + h) * splits + split;
        part_acc[row * D + d] = a;
        if (d == 0) { part_ml[row * 2] = M; part_ml[row * 2 + 1] = L; }
    }
    __syncthreads();   // shared memory is reused by the next pass
}

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
