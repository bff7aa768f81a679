// kern own kernels: the shared parts of the decode attentions (attn_decode.cu, one launch;
// attn_decode_split.cu, the split pair; attn_decode_cluster.cu, the cluster kernel): the
// paged pool's addressing and loads, the split count rule, the warp reductions and the
// split pass of the first two (decode_pass; the split pair passes out = nullptr).
// Contracts: ABI.md 3a, 3a′, 3a″.  Moved here from the three sources in session 23: every
// cubin built from them is byte-identical to before (kernels/sass_compare.py).  The cluster
// kernel's block_pass repeats decode_pass's per-key arithmetic: taking it into one function
// here changes the SASS's instruction schedule (not its operations), which the byte check
// cannot accept without a GPU run.
#pragma once

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

}  // namespace
