// kern own kernels: decode attention whose key splits merge over distributed shared memory,
// one launch per call (kern-gen --attention cluster).  ABI.md 3a″.
//
// Why an own kernel beside the split pair (attn_decode_split.cu, 3a): in the decode step the
// pair costs 7.1-7.9 us a layer (kern-run bench --ablate, H200, context 144-1016), a third
// of SmolLM2's step; its splits pay a round trip of (m, l, acc) through L2 and a second
// dependent launch.  Here the kC = 8 splits of a (row, kv head) are one thread-block
// cluster: each block reduces its keys to (M, L, a) per query head in its shared memory,
// the cluster barrier publishes them, and each block merges the eight through DSMEM for
// its 1/8 of `out` and writes it (at d64 the states are pushed instead: session 31,
// attn_cluster_pass.cuh).
// No scratch, no atomic, no second launch.  In the decode step (kern-run
// bench, H100, PDL on, this 256-thread build): SmolLM2 0.707 -> 0.640 ms/token, Qwen3-4B shape
// 3.636 -> 3.582; with the rope folded in (below) 0.594 and 3.520 (docs/measurements.md,
// session 22).
//
// Grid (n_kv_heads, kC, tokens), cluster (1, kC, 1) compiled in (`__cluster_dims__`: no
// launch attribute needed), block Threads<D>::value.  Row t sees kv_len = kv_lens[t] >= 1 keys; the
// block of cluster rank r handles keys [r*c, min((r+1)*c, kv_len)), c = ceil(kv_len / kC),
// for all G = n_q_heads / n_kv_heads <= kMaxG query heads of its kv head.  The keys are split
// evenly at every context, so a row's cache is streamed by kC blocks: the kernel is for short
// and medium contexts (the pair scales its splits with the context; from ~4k keys on it is
// as fast or faster, ABI.md 3a″).
//
// Paged pool and strides as in attn_decode_split.cu (ABI.md 3).
#include <cooperative_groups.h>

#include "attn_core.cuh"
#include "rope_core.cuh"

// Probe builds only (probe_attn_timeline.py; 0 in the build, where the KERN_ATL macros are
// empty): thread 0 of each block of the rope variants reads %globaltimer at eight points and
// appends one record tagged with its output row (kern_timeline.cuh): t[0] entry, t[1] first
// key batch issued (before the wait), t[2] wait returned, t[3] q (and the new k / v) ready in
// shared memory, t[4] the block's pass and in-block merge done, t[5] first cluster barrier
// passed, t[6] the block's share of the cluster merge done, t[7] second barrier passed (t[6]
// again with the pushed merge, which has none).
#ifndef KERN_ATTN_TIMELINE
#define KERN_ATTN_TIMELINE 0
#endif
#if KERN_ATTN_TIMELINE
#include "kern_timeline.cuh"
#define KERN_ATL(i) kern_tl_stamp<8>(i)
#define KERN_ATL_RECORD(tag) kern_tl_append<8>(tag)
#else
#define KERN_ATL(i) do {} while (0)
#define KERN_ATL_RECORD(tag) do {} while (0)
#endif

namespace cg = cooperative_groups;

// Threads a block: 256 keeps 32 (d64) or 16 (d128) keys of each of kUnroll batches in flight.
// Measured against 128 (probe_attn_cluster.py, H100, no PDL, us per call at contexts
// 144 / 1024 / 4096): d128 6.54 / 8.84 / 19.71 vs 6.53 / 10.49 / 25.61; d64 5.37 / 5.61 / 9.93
// vs 4.97 / 6.11 / 12.79 (the split pair: 7.85 / 10.42 / 22.32 and 7.18 / 7.94 / 9.91).
// Overridable for the probe only; the build uses these defaults.
#ifndef KERN_CLUSTER_THREADS_D64
#define KERN_CLUSTER_THREADS_D64 256
#endif
#ifndef KERN_CLUSTER_THREADS_D128
#define KERN_CLUSTER_THREADS_D128 256
#endif

// The rope variants read kv_lens[t], the page table and the block's first key batch (K and V
// of its first kUnroll keys a key group, never the row's new key kv_len - 1, which this launch
// writes) before griddepcontrol.wait, so the cache round trip overlaps the previous kernel
// (the qkv GEMV, which lets its dependents launch right after its own wait:
// gemv.cu kern_gemv_et_bf16).  Those bytes are inputs and state written by earlier programs;
// reading them early is safe when every kernel before the immediate predecessor has
// completed, which the generator proves from the predecessor's code (its trigger after its
// wait, kern_gen/llama/pdl_order.py) before it gives such a step `pdl`.  The loads are
// coherent: ptxas moves .nc loads below the wait.  Measured as a lever (session 25, H100, same
// process, tokens identical; docs/measurements.md): alone SmolLM2 0.558 -> 0.550 ms/token,
// the Qwen3-4B shape 3.363 -> 3.338; with every GEMV triggering early 0.559 -> 0.519 and
// 3.353 -> 3.343.

// Every variant lets its dependents launch right after griddepcontrol.wait (not after the
// block's pass), so the o GEMV after the attention launches and streams its first W batch
// (before its own wait) while the attention runs.  Safe for any dependent: at the trigger
// every kernel before this one has completed (kern_gemv_et_bf16's guarantee).  Measured as a
// lever (session 27, H100, kern-run bench same process, tokens identical; docs/
// measurements.md): the Qwen3-4B shape 3.279 -> 3.233 ms/token, SmolLM2 0.553 -> 0.550.
#define KERN_ATTN_WAIT()                                                                   \
    do {                                                                                   \
        asm volatile("griddepcontrol.wait;" ::: "memory");                                 \
        asm volatile("griddepcontrol.launch_dependents;");                                 \
    } while (0)

namespace {

// kMaxG (query heads per kv head the kernel holds), kUnroll (keys in flight per key group),
// kLog2e and the page constants: attn_core.cuh.
// KERN_CLUSTER_SPLITS: a probe's knob only (probe_attn_cluster.py compares 4 and 2 at short
// contexts); the build and kern-gen (attn_cluster.CLUSTER_SPLITS) use 8.
#ifndef KERN_CLUSTER_SPLITS
#define KERN_CLUSTER_SPLITS 8
#endif
static_assert(KERN_CLUSTER_SPLITS == 2 || KERN_CLUSTER_SPLITS == 4 || KERN_CLUSTER_SPLITS == 8,
              "a cluster of 2, 4 or 8 blocks");
constexpr int kC = KERN_CLUSTER_SPLITS;   // blocks of a cluster = splits of a (row, kv head)

template <int D> struct Threads;
template <> struct Threads<64> { static constexpr int value = KERN_CLUSTER_THREADS_D64; };
template <> struct Threads<128> { static constexpr int value = KERN_CLUSTER_THREADS_D128; };

}  // namespace

// Merge<D>, the shared memory, block_pass and attend_and_merge.
#include "attn_cluster_pass.cuh"

namespace {

// Block (hk, rank, t) of a launch: its GQA group and row t's key range (keys split evenly
// over the cluster's kC blocks).  Traps on a grid or head counts the kernel cannot serve.
struct Block {
    int hk, rank, t, group, qh0, kv_len, k_begin, k_end;
};

// kCoherent: kv_lens[t] with a coherent load (before the wait: the rope variants).
template <bool kCoherent = false>
__device__ __forceinline__ Block block_of(const int* __restrict__ kv_lens, int n_q_heads,
                                          int n_kv_heads)
{
    Block b;
    b.hk = blockIdx.x;
    b.rank = blockIdx.y;   // cluster (1, kC, 1)
    b.t = blockIdx.z;
    b.group = n_q_heads / n_kv_heads;
    if (gridDim.y != kC || b.group > kMaxG || b.group < 1 || b.group * n_kv_heads != n_q_heads)
        __trap();
    b.qh0 = b.hk * b.group;
    if constexpr (kCoherent) {
        asm volatile("ld.global.s32 %0, [%1];" : "=r"(b.kv_len) : "l"(kv_lens + b.t));
    } else {
        b.kv_len = kv_lens[b.t];
    }
    const int chunk = (b.kv_len + kC - 1) / kC;
    b.k_begin = min(b.rank * chunk, b.kv_len);
    b.k_end = min(b.k_begin + chunk, b.kv_len);
    return b;
}

// The block's first key batch as block_pass's first iteration reads it, with coherent loads
// (before griddepcontrol.wait, the rope variants): key k_begin + kg + u*NG for u < kUnroll
// when below k_end and not `skip` (the row's new key, which this launch writes); zeros
// otherwise (block_pass does not use those).
template <int D>
__device__ __forceinline__ void first_batch(const __nv_bfloat16* kp, const __nv_bfloat16* vp,
                                            const int* table, int64_t kss, int64_t vss,
                                            int k_begin, int k_end, int skip,
                                            uint4 (&pk)[kUnroll], uint4 (&pv)[kUnroll])
{
    constexpr int LPK = D / 8;
    constexpr int NG = Smem<D>::NG;
    const int kg = threadIdx.x / LPK, sub = threadIdx.x % LPK;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int key = k_begin + kg + u * NG;
        pk[u] = make_uint4(0u, 0u, 0u, 0u);
        pv[u] = make_uint4(0u, 0u, 0u, 0u);
        if (key < k_end && key != skip) {
            int pg;
            asm volatile("ld.global.s32 %0, [%1];" : "=r"(pg) : "l"(table + (key >> kPageShift)));
            const __nv_bfloat16* k = kp + slot_offset(pg, key, kss) + sub * 8;
            const __nv_bfloat16* v = vp + slot_offset(pg, key, vss) + sub * 8;
            asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(pk[u].x), "=r"(pk[u].y), "=r"(pk[u].z), "=r"(pk[u].w) : "l"(k));
            asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(pv[u].x), "=r"(pv[u].y), "=r"(pv[u].z), "=r"(pv[u].w) : "l"(v));
        }
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
    __shared__ Smem<D> sm;
    if constexpr (Merge<D>::kPush)
        cluster_arrive_relaxed();   // awaited before the first push (block_pass)
    // Programmatic dependent launch: q, kv_lens and the cache are the previous kernels'.
    KERN_ATTN_WAIT();
    const Block b = block_of(kv_lens, n_q_heads, n_kv_heads);
    const Pass a{q + (int64_t)b.t * q_row_stride + (int64_t)b.qh0 * D, k_cache + b.hk * ksh,
                 v_cache + b.hk * vsh, block_table + (int64_t)b.t * table_stride, kss, vss,
                 b.k_begin, b.k_end, scale * kLog2e, -1, nullptr, nullptr};
    const uint4 none[kUnroll] = {};
    attend_and_merge<D, false>(a, b.group, b.rank,
                               out + ((int64_t)b.t * n_q_heads + b.qh0) * D, sm, none, none);
}

// The layer's rope and K/V cache writes folded in (ABI.md 3a‴): from the qkv GEMV's row t
// (q | k | v, bf16 [(H + 2·KV)·D]) every block rotates (NORM: RMS-norms, then rotates) its G
// query heads into shared memory, as rope_kv.cu / rope_kv_norm.cu compute q_out; the block
// whose keys hold the row's new key kv_len − 1 also rotates kv head hk's k, copies its v,
// stores both to the cache row slots[t] (as those kernels do) and attends to them from shared
// memory.  No other block reads that key, so no block reads a cache row this launch writes.
template <int D, bool NORM>
__device__ __forceinline__ void cluster_rope_decode(
    const __nv_bfloat16* __restrict__ qkv, const __nv_bfloat16* __restrict__ q_w,
    const __nv_bfloat16* __restrict__ k_w, const float* __restrict__ ang,
    const int64_t* __restrict__ slots, __nv_bfloat16* __restrict__ k_cache,
    __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ kv_lens,
    const int* __restrict__ block_table, __nv_bfloat16* __restrict__ out, int tokens,
    int64_t kss, int64_t ksh, int64_t vss, int64_t vsh, int n_q_heads, int n_kv_heads,
    float scale, int table_stride, long long cache_len, float eps)
{
    constexpr int NT = Threads<D>::value;
    constexpr int half = D / 2;
    static_assert(!NORM || NT / 32 >= kMaxG + 2, "a warp per q head, one for k, one for v");
    __shared__ Smem<D> sm;
    __shared__ __align__(16) __nv_bfloat16 q_s[kMaxG * D];
    __shared__ __align__(16) __nv_bfloat16 k_s[D];
    __shared__ __align__(16) __nv_bfloat16 v_s[D];
    uint4 pk[kUnroll], pv[kUnroll];
    KERN_ATL(0);
    if constexpr (Merge<D>::kPush)
        cluster_arrive_relaxed();   // awaited before the first push (block_pass)
    const Block b = block_of<true>(kv_lens, n_q_heads, n_kv_heads);
    first_batch<D>(k_cache + b.hk * ksh, v_cache + b.hk * vsh,
                   block_table + (int64_t)b.t * table_stride, kss, vss, b.k_begin, b.k_end,
                   b.kv_len - 1, pk, pv);
    KERN_ATL(1);
    KERN_ATTN_WAIT();
    KERN_ATL(2);
    const int nq = n_q_heads * D, nk = n_kv_heads * D;
    const __nv_bfloat16* row = qkv + (int64_t)b.t * (nq + 2 * nk);
    const __nv_bfloat16* kx = row + nq + b.hk * D;
    const __nv_bfloat16* vx = row + nq + nk + b.hk * D;
    const int new_key = b.kv_len - 1;
    const bool writer = new_key >= b.k_begin && new_key < b.k_end;
    int64_t slot = slots[b.t];
    if (slot < 0)
        slot += cache_len;
    const bool store = writer && slot >= 0 && slot < cache_len;   // as the captured writers
    __nv_bfloat16* kc = k_cache + slot * kss + b.hk * ksh;
    __nv_bfloat16* vc = v_cache + slot * vss + b.hk * vsh;
    if (NORM) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        __nv_bfloat16 o[kRopeMaxPerLane];
        if (warp < b.group || (warp == b.group && writer)) {
            const bool is_q = warp < b.group;
            norm_rope_warp(is_q ? row + (b.qh0 + warp) * D : kx, is_q ? q_w : k_w, ang, b.t,
                           tokens, D, eps, o);
#pragma unroll
            for (int i = 0; i < D / 32; ++i) {
                const int d = lane + 32 * i;
                if (is_q) {
                    q_s[warp * D + d] = o[i];
                } else {
                    k_s[d] = o[i];
                    if (store) kc[d] = o[i];
                }
            }
        } else if (warp == b.group + 1 && writer) {
            for (int d = lane; d < D; d += 32) {
                v_s[d] = vx[d];
                if (store) vc[d] = vx[d];
            }
        }
    } else {
        for (int i = threadIdx.x; i < b.group * D; i += NT) {
            const int d = i % D;
            const float a = ang[(int64_t)(d % half) * tokens + b.t];
            q_s[i] = __float2bfloat16_rn(rope_elem(row + (b.qh0 + i / D) * D, d, half, a));
        }
        if (writer) {
            for (int d = threadIdx.x; d < D; d += NT) {
                const float a = ang[(int64_t)(d % half) * tokens + b.t];
                k_s[d] = __float2bfloat16_rn(rope_elem(kx, d, half, a));
                v_s[d] = vx[d];
                if (store) { kc[d] = k_s[d]; vc[d] = v_s[d]; }
            }
        }
    }
    __syncthreads();
    KERN_ATL(3);
    const Pass a{q_s, k_cache + b.hk * ksh, v_cache + b.hk * vsh,
                 block_table + (int64_t)b.t * table_stride, kss, vss, b.k_begin, b.k_end,
                 scale * kLog2e, writer ? new_key : -1, k_s, v_s};
    attend_and_merge<D, true>(
        a, b.group, b.rank, out + ((int64_t)b.t * n_q_heads + b.qh0) * D, sm, pk, pv);
}

}  // namespace

#define KERN_CLUSTER_SYMBOLS(D)                                                             \
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
}                                                                                           \
extern "C" __global__ void __cluster_dims__(1, kC, 1) __launch_bounds__(Threads<D>::value)  \
kern_attn_decode_cluster_rope_bf16_d##D(                                                    \
    const __nv_bfloat16* __restrict__ qkv, const float* __restrict__ ang,                   \
    const int64_t* __restrict__ slots, __nv_bfloat16* __restrict__ k_cache,                 \
    __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ kv_lens,                   \
    const int* __restrict__ block_table, __nv_bfloat16* __restrict__ out, int tokens,       \
    int64_t k_stride_slot, int64_t k_stride_head, int64_t v_stride_slot,                    \
    int64_t v_stride_head, int n_q_heads, int n_kv_heads, float scale, int table_stride,    \
    long long cache_len)                                                                    \
{                                                                                           \
    cluster_rope_decode<D, false>(qkv, nullptr, nullptr, ang, slots, k_cache, v_cache,      \
                                  kv_lens, block_table, out, tokens, k_stride_slot,         \
                                  k_stride_head, v_stride_slot, v_stride_head, n_q_heads,   \
                                  n_kv_heads, scale, table_stride, cache_len, 0.f);         \
}                                                                                           \
extern "C" __global__ void __cluster_dims__(1, kC, 1) __launch_bounds__(Threads<D>::value)  \
kern_attn_decode_cluster_rope_norm_bf16_d##D(                                               \
    const __nv_bfloat16* __restrict__ qkv, const __nv_bfloat16* __restrict__ q_w,           \
    const __nv_bfloat16* __restrict__ k_w, const float* __restrict__ ang,                   \
    const int64_t* __restrict__ slots, __nv_bfloat16* __restrict__ k_cache,                 \
    __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ kv_lens,                   \
    const int* __restrict__ block_table, __nv_bfloat16* __restrict__ out, int tokens,       \
    int64_t k_stride_slot, int64_t k_stride_head, int64_t v_stride_slot,                    \
    int64_t v_stride_head, int n_q_heads, int n_kv_heads, float scale, int table_stride,    \
    long long cache_len, float eps)                                                         \
{                                                                                           \
    cluster_rope_decode<D, true>(qkv, q_w, k_w, ang, slots, k_cache, v_cache, kv_lens,      \
                                 block_table, out, tokens, k_stride_slot, k_stride_head,    \
                                 v_stride_slot, v_stride_head, n_q_heads, n_kv_heads,       \
                                 scale, table_stride, cache_len, eps);                      \
}

KERN_CLUSTER_SYMBOLS(64)
KERN_CLUSTER_SYMBOLS(128)
