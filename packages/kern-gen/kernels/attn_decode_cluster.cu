// kern own kernels: decode attention whose key splits merge over distributed shared memory,
// one launch per call (kern-gen --attention cluster).  ABI.md 3a″.
//
// Why an own kernel beside the split pair (attn_decode_split.cu, 3a): in the decode step the
// pair costs 7.1-7.9 us a layer (kern-run bench --ablate, H200, context 144-1016), a third
// of SmolLM2's step; its splits pay a round trip of (m, l, acc) through L2 and a second
// dependent launch.  Here the kC = 8 splits of a (row, kv head) are one thread-block
// cluster: each block reduces its keys to (M, L, a) per query head in its shared memory,
// the cluster barrier publishes them, and the cluster's rank 0 merges the eight through
// DSMEM and writes `out`.  No scratch, no atomic, no second launch.  Measured against the
// pair (probe_attn_cluster.py, H100, graph-replayed, no PDL): 5.06 vs 7.36 us (9q/3kv d64)
// and 6.55 vs 7.86 (32q/8kv d128) at context 144.
//
// Grid (n_kv_heads, kC, tokens), cluster (1, kC, 1) compiled in (`__cluster_dims__`: no
// launch attribute needed), block kThreads<D>.  Row t sees kv_len = kv_lens[t] >= 1 keys; the
// block of cluster rank r handles keys [r*c, min((r+1)*c, kv_len)), c = ceil(kv_len / kC),
// for all G = n_q_heads / n_kv_heads <= kMaxG query heads of its kv head.  The keys are split
// evenly at every context, so a row's cache is streamed by kC blocks: the kernel is for short
// and medium contexts (the pair scales its splits with the context and is faster from ~1-4k
// keys on; see ABI.md 3a″).
//
// Paged pool and strides as in attn_decode_split.cu (ABI.md 3).
#include <cuda_bf16.h>
#include <stdint.h>
#include <math_constants.h>
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

// Threads a block: 16 (d64) or 8 (d128) keys in flight per load batch at 128; more threads
// keep more bytes in flight at longer contexts.  Overridable for the probe only
// (probe_attn_cluster.py); the build uses these defaults.
#ifndef KERN_CLUSTER_THREADS_D64
#define KERN_CLUSTER_THREADS_D64 128
#endif
#ifndef KERN_CLUSTER_THREADS_D128
#define KERN_CLUSTER_THREADS_D128 128
#endif

namespace {

constexpr int kMaxG = 4;     // query heads per kv head (GQA group) the kernel holds
constexpr int kUnroll = 4;   // keys in flight per key group
constexpr int kC = 8;        // blocks of a cluster = splits of a (row, kv head)
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kPageTokens = 16;  // slots per page of the KV pool (caller contract PAGE_TOKENS)
constexpr int kPageShift = 4;
static_assert(kPageTokens == 1 << kPageShift, "page size is a power of two");

template <int D> struct Threads;
template <> struct Threads<64> { static constexpr int value = KERN_CLUSTER_THREADS_D64; };
template <> struct Threads<128> { static constexpr int value = KERN_CLUSTER_THREADS_D128; };

__device__ __forceinline__ void bf16x8_to_f32(const uint4& w, float (&f)[8]) {
    const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        f[2 * k] = __uint_as_float(ws[k] << 16);
        f[2 * k + 1] = __uint_as_float(ws[k] & 0xffff0000u);
    }
}

__device__ __forceinline__ uint4 ldg_nc(const __nv_bfloat16* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

// Element offset of key `key` (in page `page`) in a cache of slot stride `stride`.
__device__ __forceinline__ int64_t slot_offset(int page, int key, int64_t stride) {
    return ((int64_t)page * kPageTokens + (key & (kPageTokens - 1))) * stride;
}

// Shared memory of a block: the key groups' partial states, then the block's merged state
// (read by the cluster's rank 0 through DSMEM).
template <int D>
struct Smem {
    static constexpr int NG = Threads<D>::value / (D / 8);   // key groups of a block
    float m[NG * kMaxG];
    float l[NG * kMaxG];
    float acc[NG * kMaxG * D];
    float res_m[kMaxG];
    float res_l[kMaxG];
    float res_a[kMaxG * D];
};

// This block's keys [k_begin, k_end) for the G query heads qh0.. of row t, reduced to
// (res_m, res_l, res_a) per head: res_m the max score in log2 units (-inf: no key), res_l the
// sum of 2^(s - res_m), res_a the unnormalised accumulator.  The per-key arithmetic is the
// split pair's (attn_decode_split.cu decode_pass).
template <int D, int G>
__device__ __forceinline__ void block_pass(
    const __nv_bfloat16* __restrict__ q, int q_row_stride, const __nv_bfloat16* __restrict__ kp,
    const __nv_bfloat16* __restrict__ vp, const int* __restrict__ table, int64_t kss,
    int64_t vss, int t, int qh0, int k_begin, int k_end, float scale_log2, Smem<D>& sm)
{
    constexpr int LPK = D / 8;                 // lanes per key (8 dims each)
    constexpr int NT = Threads<D>::value;
    constexpr int NG = Smem<D>::NG;
    const int tid = threadIdx.x, kg = tid / LPK, sub = tid % LPK;
    float qf[G][8], m[G], l[G], acc[G][8];
#pragma unroll
    for (int h = 0; h < G; ++h) {
        const uint4 w = *reinterpret_cast<const uint4*>(
            q + (int64_t)t * q_row_stride + (int64_t)(qh0 + h) * D + sub * 8);
        bf16x8_to_f32(w, qf[h]);
        m[h] = -CUDART_INF_F;
        l[h] = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) { qf[h][j] *= scale_log2; acc[h][j] = 0.f; }
    }
    // The loop bound is block-uniform (the shuffles need every lane); a lane's keys are
    // it + u*NG + kg, masked when >= k_end (their table entries are never read).
    for (int it = k_begin; it < k_end; it += NG * kUnroll) {
        const int base = it + kg;
        uint4 kr[kUnroll], vr[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int key = base + u * NG;
            if (key < k_end) {
                const int pg = table[key >> kPageShift];
                kr[u] = ldg_nc(kp + slot_offset(pg, key, kss) + sub * 8);
                vr[u] = ldg_nc(vp + slot_offset(pg, key, vss) + sub * 8);
            } else {
                kr[u] = make_uint4(0u, 0u, 0u, 0u);
                vr[u] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
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
            const float m_use = (m_new == -CUDART_INF_F) ? 0.f : m_new;
            const float corr = exp2f(m[h] - m_use);
            float p[kUnroll], ps = 0.f;
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
#pragma unroll
    for (int h = 0; h < G; ++h) {
        if (sub == 0) { sm.m[kg * kMaxG + h] = m[h]; sm.l[kg * kMaxG + h] = l[h]; }
#pragma unroll
        for (int j = 0; j < 8; ++j) sm.acc[(kg * kMaxG + h) * D + sub * 8 + j] = acc[h][j];
    }
    __syncthreads();
    // The key groups merged in group order (M = max, weights 2^(m_g - M), empty groups 0).
    for (int idx = tid; idx < G * D; idx += NT) {
        const int h = idx / D, d = idx % D;
        float M = -CUDART_INF_F;
        for (int g = 0; g < NG; ++g) M = fmaxf(M, sm.m[g * kMaxG + h]);
        float a = 0.f, L = 0.f;
        if (M != -CUDART_INF_F) {
            for (int g = 0; g < NG; ++g) {
                const float mg = sm.m[g * kMaxG + h];
                const float w = (mg == -CUDART_INF_F) ? 0.f : exp2f(mg - M);
                a = fmaf(sm.acc[(g * kMaxG + h) * D + d], w, a);
                L = fmaf(sm.l[g * kMaxG + h], w, L);
            }
        }
        sm.res_a[h * D + d] = a;
        if (d == 0) { sm.res_m[h] = M; sm.res_l[h] = L; }
    }
}

template <int D>
__device__ __forceinline__ void cluster_decode(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ kv_lens,
    const int* __restrict__ block_table, __nv_bfloat16* __restrict__ out, int q_row_stride,
    int64_t kss, int64_t ksh, int64_t vss, int64_t vsh, int n_q_heads, int n_kv_heads,
    float scale, int table_stride)
{
    constexpr int NT = Threads<D>::value;
    __shared__ Smem<D> sm;
    cg::cluster_group cl = cg::this_cluster();

    // Programmatic dependent launch: q, kv_lens and the cache are the previous kernels'.
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const int hk = blockIdx.x, rank = blockIdx.y, t = blockIdx.z;   // rank: cluster (1, kC, 1)
    const int group = n_q_heads / n_kv_heads;
    if (gridDim.y != kC || group > kMaxG || group < 1 || group * n_kv_heads != n_q_heads)
        __trap();
    const int kv_len = kv_lens[t];
    const int chunk = (kv_len + kC - 1) / kC;
    const int k_begin = min(rank * chunk, kv_len), k_end = min(k_begin + chunk, kv_len);
    const int qh0 = hk * group;
    const __nv_bfloat16* kp = k_cache + (int64_t)hk * ksh;
    const __nv_bfloat16* vp = v_cache + (int64_t)hk * vsh;
    const int* table = block_table + (int64_t)t * table_stride;
    const float sl = scale * kLog2e;
    switch (group) {
        case 1: block_pass<D, 1>(q, q_row_stride, kp, vp, table, kss, vss, t, qh0, k_begin, k_end, sl, sm); break;
        case 2: block_pass<D, 2>(q, q_row_stride, kp, vp, table, kss, vss, t, qh0, k_begin, k_end, sl, sm); break;
        case 3: block_pass<D, 3>(q, q_row_stride, kp, vp, table, kss, vss, t, qh0, k_begin, k_end, sl, sm); break;
        default: block_pass<D, 4>(q, q_row_stride, kp, vp, table, kss, vss, t, qh0, k_begin, k_end, sl, sm); break;
    }
    asm volatile("griddepcontrol.launch_dependents;");
    cl.sync();   // release/acquire: every block's (res_m, res_l, res_a) is visible cluster-wide
    if (rank == 0) {
        // The kC splits merged in rank order (deterministic; empty splits weigh 0).
        for (int idx = threadIdx.x; idx < group * D; idx += NT) {
            const int h = idx / D, d = idx % D;
            float Ms[kC];
            float M = -CUDART_INF_F;
#pragma unroll
            for (int r = 0; r < kC; ++r) {
                Ms[r] = *cl.map_shared_rank(&sm.res_m[h], r);
                M = fmaxf(M, Ms[r]);
            }
            float a = 0.f, L = 0.f;
#pragma unroll
            for (int r = 0; r < kC; ++r) {
                const float w = (Ms[r] == -CUDART_INF_F) ? 0.f : exp2f(Ms[r] - M);
                a = fmaf(*cl.map_shared_rank(&sm.res_a[h * D + d], r), w, a);
                L = fmaf(*cl.map_shared_rank(&sm.res_l[h], r), w, L);
            }
            out[((int64_t)t * n_q_heads + qh0 + h) * D + d] = __float2bfloat16(a / L);
        }
    }
    cl.sync();   // a block's shared memory must outlive rank 0's reads of it
}

}  // namespace

#define KERN_CLUSTER_SYMBOL(D)                                                              \
extern "C" __global__ void __cluster_dims__(1, kC, 1) __launch_bounds__(Threads<D>::value)  \
kern_attn_decode_cluster_bf16_d##D(                                                         \
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,         \
    const __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ kv_lens,             \
    const int* __restrict__ block_table, __nv_bfloat16* __restrict__ out, int q_row_stride, \
    int64_t k_stride_slot, int64_t k_stride_head, int64_t v_stride_slot,                    \
    int64_t v_stride_head, int n_q_heads, int n_kv_heads, float scale, int table_stride)    \
{                                                                                           \
    cluster_decode<D>(q, k_cache, v_cache, kv_lens, block_table, out, q_row_stride,         \
                      k_stride_slot, k_stride_head, v_stride_slot, v_stride_head,           \
                      n_q_heads, n_kv_heads, scale, table_stride);                          \
}

KERN_CLUSTER_SYMBOL(64)
KERN_CLUSTER_SYMBOL(128)
