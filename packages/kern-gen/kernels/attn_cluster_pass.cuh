// kern own kernels: the cluster decode attention's key pass and merges (attn_decode_cluster.cu,
// ABI.md 3a″): a block's pass over its keys and its key groups' merge (block_pass), then the
// merge of the cluster's kC blocks (attend_and_merge).  Split out of attn_decode_cluster.cu in
// session 31 (the cubin is byte for byte the same); only that file includes it, after kC,
// Threads<D>, the namespace alias cg and the KERN_ATL timeline macros it defines.
#pragma once

namespace {

// Both merges (the key groups of a block, then the cluster's blocks) compute each weight
// 2^(m - M) once per (head, key group) or (head, rank), and the cluster merge is spread over
// the cluster's blocks, each storing 1/kC of the output.  Until session 30 every output
// element recomputed M and its weights and rank 0 merged alone: the same operations on the
// same values in the same order for every element (max is exact in any order), so the same
// bits (the GPU test of session 30's c16 compared the two builds bit for bit on 12 cases;
// commit ba910f5 has it and the old merges).  Measured as a
// lever (H100, kern-run bench same process, tokens identical; docs/measurements.md, session
// 30): the Qwen3-4B shape 3.202 -> 3.177 ms/token, SmolLM2 0.489 -> 0.479; the attention's
// last exit after the qkv GEMV's last store 7.23 -> 6.66 us (probe_attn_timeline.py).

// Session 31 (both keep every output bit; docs/measurements.md):
// - pushed merge: each block stores its merged state through DSMEM into the shared memory
//   of the kC blocks (each receives the slice of res_a it merges) before one cluster
//   barrier, instead of publishing it, the others pulling it after the barrier and a second
//   barrier guarding its shared memory until they have; the cluster's start (which a DSMEM
//   store needs) is awaited by a barrier arrived at the kernel's entry.
// - fitted passes: a block whose keys fit one pass of U < kUnroll keys a key group
//   (count <= U * NG) runs block_pass with U; the key slots U .. kUnroll - 1 it skips would
//   have been masked (score -inf, weight and value 0: exact zeros added).
// Measured together (H100, kern-run bench same process, tokens identical; a GPU test
// compared them bit for bit with the old build on 18 cases, commit 7335ffa):
// SmolLM2 (d64) 0.478 -> 0.447 ms/token (the pushed merge alone 0.463).  They are the d64
// code.  At d128 the Qwen3-4B shape measured them only together with rope_core.cuh's
// KERN_ROPE_LOADS_FIRST: 3.092 -> 3.131 ms/token with PDL (slower; 3.431 -> 3.405 without),
// although the attention alone got faster (probe_attn_timeline.py: last exit after qkv's
// last store 6.78 -> 5.92 us), so d128 keeps the old merge until they are measured without
// it: -D KERN_CLUSTER_PUSH_D128=1 (a lever build) gives d128 both.
#ifndef KERN_CLUSTER_PUSH_D128
#define KERN_CLUSTER_PUSH_D128 0
#endif
template <int D>
struct Merge {
    static constexpr bool kPush = D == 64 || KERN_CLUSTER_PUSH_D128;   // and fitted passes
};

// Shared memory of a block: the key groups' partial states, then the block's merged state
// (read by every block of the cluster through DSMEM where the merge is not pushed) and the
// merges' weights; with the pushed merge (Merge<D>::kPush), after them, the inbox the
// cluster's blocks store their merged states' slices into.
template <int D>
struct SmemBase {
    static constexpr int NG = Threads<D>::value / (D / 8);   // key groups of a block
    float m[NG * kMaxG];
    float l[NG * kMaxG];
    float acc[NG * kMaxG * D];
    float res_m[kMaxG];
    float res_l[kMaxG];
    float res_a[kMaxG * D];
    float gw[kMaxG * NG];    // in-block merge: 2^(m_g - M) per (head, key group)
    float cw[kMaxG * kC];    // cluster merge: 2^(M_r - M) per (head, rank)
    float cL[kMaxG];         // cluster merge: the merged L per head
};

template <int D, bool kPush = Merge<D>::kPush>
struct Smem : SmemBase<D> {};

template <int D>
struct Smem<D, true> : SmemBase<D> {
    static constexpr int kSlice = kMaxG * D / kC;   // res_a elements a block merges, at most
    float in_m[kC * kMaxG];  // rank r's res_m / res_l of head h at [r * kMaxG + h]
    float in_l[kC * kMaxG];
    float in_a[kC * kSlice]; // rank r's res_a over this block's slice at [r * kSlice + j]
};

// Cluster barrier halves (PTX barrier.cluster; every thread of the block executes them).
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}

// What a block's pass reads: G query heads D apart from `q` (global or shared memory), kv
// head hk's keys [k_begin, k_end) of one row through its page table, except key `new_key`
// (-1: none), whose K and V rows are `k_new` / `v_new` (shared memory: the row's own new key,
// computed by the folded rope, which this kernel also stores to the cache).
struct Pass {
    const __nv_bfloat16* q;
    const __nv_bfloat16* kp;
    const __nv_bfloat16* vp;
    const int* table;
    int64_t kss, vss;
    int k_begin, k_end;
    float scale_log2;
    int new_key;
    const __nv_bfloat16* k_new;
    const __nv_bfloat16* v_new;
};

// Where block_pass leaves the block's merged state: its own shared memory (res_m, res_l,
// res_a), or (Merge<D>::kPush) every rank's inbox, once the cluster has started.
struct Sink {
    int rank, per;   // this block's cluster rank; res_a elements a rank merges
};

// The pass reduced to (res_m, res_l, res_a) per head: res_m the max score in log2 units
// (-inf: no key), res_l the sum of 2^(s - res_m), res_a the unnormalised accumulator.  The
// per-key arithmetic is the split pair's (attn_decode_split.cu decode_pass).

template <int D, int G, int U, bool PRE>
__device__ __forceinline__ void block_pass(const Pass& a, Smem<D>& sm,
                                           const uint4 (&pk)[kUnroll], const uint4 (&pv)[kUnroll],
                                           const Sink& sink)
{
    constexpr int LPK = D / 8;                 // lanes per key (8 dims each)
    constexpr int NT = Threads<D>::value;
    constexpr int NG = Smem<D>::NG;
    const int tid = threadIdx.x, kg = tid / LPK, sub = tid % LPK;
    static_assert(U >= 1 && U <= kUnroll, "a pass holds at most kUnroll keys a key group");
    float qf[G][8], m[G], l[G], acc[G][8];
#pragma unroll
    for (int h = 0; h < G; ++h) {
        const uint4 w = *reinterpret_cast<const uint4*>(a.q + h * D + sub * 8);
        bf16x8_to_f32(w, qf[h]);
        m[h] = -CUDART_INF_F;
        l[h] = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) { qf[h][j] *= a.scale_log2; acc[h][j] = 0.f; }
    }
    // The loop bound is block-uniform (the shuffles need every lane); a lane's keys are
    // it + u*NG + kg, masked when >= k_end (their table entries are never read).
    for (int it = a.k_begin; it < a.k_end; it += NG * U) {
        const int base = it + kg;
        uint4 kr[U], vr[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int key = base + u * NG;
            if (key == a.new_key) {
                kr[u] = *reinterpret_cast<const uint4*>(a.k_new + sub * 8);
                vr[u] = *reinterpret_cast<const uint4*>(a.v_new + sub * 8);
            } else if (key < a.k_end) {
                if (PRE && it == a.k_begin) {   // loaded before the wait (first_batch)
                    kr[u] = pk[u];
                    vr[u] = pv[u];
                } else {
                    const int pg = a.table[key >> kPageShift];
                    kr[u] = ldg_nc(a.kp + slot_offset(pg, key, a.kss) + sub * 8);
                    vr[u] = ldg_nc(a.vp + slot_offset(pg, key, a.vss) + sub * 8);
                }
            } else {
                kr[u] = make_uint4(0u, 0u, 0u, 0u);
                vr[u] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
        float s[U][G];
#pragma unroll
        for (int u = 0; u < U; ++u) {
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
                s[u][h] = (base + u * NG < a.k_end) ? d : -CUDART_INF_F;
            }
        }
#pragma unroll
        for (int h = 0; h < G; ++h) {
            float mx = s[0][h];
#pragma unroll
            for (int u = 1; u < U; ++u) mx = fmaxf(mx, s[u][h]);
            const float m_new = fmaxf(m[h], mx);
            const float m_use = (m_new == -CUDART_INF_F) ? 0.f : m_new;
            const float corr = exp2f(m[h] - m_use);
            float p[U], ps = 0.f;
#pragma unroll
            for (int u = 0; u < U; ++u) { p[u] = exp2f(s[u][h] - m_use); ps += p[u]; }
            l[h] = l[h] * corr + ps;
            m[h] = m_new;
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[h][j] *= corr;
#pragma unroll
            for (int u = 0; u < U; ++u) {
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
    cg::cluster_group cl = cg::this_cluster();
    if constexpr (Merge<D>::kPush)
        cluster_wait();   // every block of the cluster runs: its inbox may be written
    static_assert(NG <= 32 && G <= NT / 32, "a warp per head, a lane per key group");
    // The key groups merged in group order (M = max, weights 2^(m_g - M), empty groups 0):
    // warp h finds head h's M by a shuffle max (exact in any order) and each lane g its
    // weight; L in group order by lane 0.  Then every output element sums its groups.
    if (tid < 32 * G) {
        const int h = tid >> 5, g = tid & 31;
        const float mg = g < NG ? sm.m[g * kMaxG + h] : -CUDART_INF_F;
        float M = mg;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
        const float w = (M == -CUDART_INF_F || mg == -CUDART_INF_F) ? 0.f : exp2f(mg - M);
        if (g < NG) sm.gw[h * NG + g] = w;
        __syncwarp();
        if (g == 0) {
            float L = 0.f;
            for (int k = 0; k < NG; ++k) L = fmaf(sm.l[k * kMaxG + h], sm.gw[h * NG + k], L);
            if constexpr (Merge<D>::kPush) {
#pragma unroll
                for (int r = 0; r < kC; ++r) {
                    *cl.map_shared_rank(&sm.in_m[sink.rank * kMaxG + h], r) = M;
                    *cl.map_shared_rank(&sm.in_l[sink.rank * kMaxG + h], r) = L;
                }
            } else {
                sm.res_m[h] = M;
                sm.res_l[h] = L;
            }
        }
    }
    __syncthreads();
    for (int idx = tid; idx < G * D; idx += NT) {
        const int h = idx / D, d = idx % D;
        float acc = 0.f;
#pragma unroll 8
        for (int g = 0; g < NG; ++g)
            acc = fmaf(sm.acc[(g * kMaxG + h) * D + d], sm.gw[h * NG + g], acc);
        if constexpr (Merge<D>::kPush) {
            const int dst = idx / sink.per;   // the rank that merges element idx
            *cl.map_shared_rank(&sm.in_a[sink.rank * Smem<D>::kSlice + idx - dst * sink.per],
                                dst) = acc;
        } else {
            sm.res_a[h * D + d] = acc;
        }
    }
}

// block_pass with the fewest keys a key group that hold the block's keys in one pass
// (Merge<D>::kPush's fitted passes; the same bits as U = kUnroll), else kUnroll.
template <int D, int G, bool PRE>
__device__ __forceinline__ void block_pass_fit(const Pass& a, Smem<D>& sm,
                                               const uint4 (&pk)[kUnroll],
                                               const uint4 (&pv)[kUnroll], const Sink& sink)
{
    if constexpr (Merge<D>::kPush) {
        constexpr int NG = Smem<D>::NG;
        const int count = a.k_end - a.k_begin;   // block-uniform
        static_assert(kUnroll == 4, "the fits below are 1, 2 and kUnroll keys a key group");
        if (count <= NG) {
            block_pass<D, G, 1, PRE>(a, sm, pk, pv, sink);
            return;
        }
        if (count <= 2 * NG) {
            block_pass<D, G, 2, PRE>(a, sm, pk, pv, sink);
            return;
        }
    }
    block_pass<D, G, kUnroll, PRE>(a, sm, pk, pv, sink);
}

// The block's pass (G = group query heads), then the cluster's merge: each block reads the
// kC blocks' states (through DSMEM, or pushed into its inbox), merges them in rank order
// (deterministic; empty splits weigh 0) for its 1/kC of out[t, qh0 .. qh0 + group) and
// writes that.
// PRE: pk / pv hold the block's first key batch (first_batch).
template <int D, bool PRE>
__device__ __forceinline__ void attend_and_merge(const Pass& a, int group, int rank,
                                                 __nv_bfloat16* __restrict__ out_row,
                                                 Smem<D>& sm, const uint4 (&pk)[kUnroll],
                                                 const uint4 (&pv)[kUnroll])
{
    constexpr int NT = Threads<D>::value;
    cg::cluster_group cl = cg::this_cluster();
    constexpr bool kPush = Merge<D>::kPush;
    // res_a elements a rank merges (computed after the pass where the block keeps its state)
    const int per_push = kPush ? (group * D + kC - 1) / kC : 0;
    const Sink sink{rank, per_push};
    switch (group) {
        case 1: block_pass_fit<D, 1, PRE>(a, sm, pk, pv, sink); break;
        case 2: block_pass_fit<D, 2, PRE>(a, sm, pk, pv, sink); break;
        case 3: block_pass_fit<D, 3, PRE>(a, sm, pk, pv, sink); break;
        default: block_pass_fit<D, 4, PRE>(a, sm, pk, pv, sink); break;
    }
    KERN_ATL(4);
    cl.sync();   // release/acquire: every block's merged state is visible where it is read
    KERN_ATL(5);
    // Rank r's res_m / res_l of head h and (rank_a below) res_a element idx: pushed, in this
    // block's inbox; kept, in rank r's shared memory (DSMEM).
    auto rank_m = [&](int h, int r) -> float {
        if constexpr (kPush) return sm.in_m[r * kMaxG + h];
        else return *cl.map_shared_rank(&sm.res_m[h], r);
    };
    auto rank_l = [&](int h, int r) -> float {
        if constexpr (kPush) return sm.in_l[r * kMaxG + h];
        else return *cl.map_shared_rank(&sm.res_l[h], r);
    };
    // Lane (h, r) of the first G * kC threads reads rank r's (M, L) of head h; the kC lanes of
    // a head find M by a shuffle max, their weights 2^(M_r - M) and L in rank order.  Then
    // each block merges its 1/kC of the output elements, the ranks in rank order.
    static_assert(kMaxG * kC <= NT, "a thread per (head, rank)");
    if (threadIdx.x < 32 * ((group * kC + 31) / 32)) {
        const int h = threadIdx.x / kC, r = threadIdx.x % kC;
        const bool on = h < group;
        const float mr = on ? rank_m(h, r) : -CUDART_INF_F;
        const float lr = on ? rank_l(h, r) : 0.f;
        float M = mr;
#pragma unroll
        for (int off = kC / 2; off > 0; off >>= 1)
            M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
        const float w = (mr == -CUDART_INF_F) ? 0.f : exp2f(mr - M);
        float L = 0.f;
        const int lane0 = (threadIdx.x & 31) - r;
#pragma unroll
        for (int k = 0; k < kC; ++k)
            L = fmaf(__shfl_sync(0xffffffffu, lr, lane0 + k),
                     __shfl_sync(0xffffffffu, w, lane0 + k), L);
        if (on) {
            sm.cw[h * kC + r] = w;
            if (r == 0) sm.cL[h] = L;
        }
    }
    __syncthreads();
    const int per = kPush ? per_push : (group * D + kC - 1) / kC;
    auto rank_a = [&](int idx, int r) -> float {
        if constexpr (kPush) return sm.in_a[r * Smem<D>::kSlice + idx - rank * per];
        else return *cl.map_shared_rank(&sm.res_a[idx], r);
    };
    const int end = min(group * D, (rank + 1) * per);
    for (int idx = rank * per + threadIdx.x; idx < end; idx += NT) {
        const int h = idx / D, d = idx % D;
        float acc = 0.f;
#pragma unroll
        for (int r = 0; r < kC; ++r)
            acc = fmaf(rank_a(h * D + d, r), sm.cw[h * kC + r], acc);
        out_row[h * D + d] = __float2bfloat16(acc / sm.cL[h]);
    }
    KERN_ATL(6);
    if constexpr (!kPush)
        cl.sync();   // a block's shared memory must outlive the other blocks' reads of it
    KERN_ATL(7);
    KERN_ATL_RECORD(out_row);
}

}  // namespace
