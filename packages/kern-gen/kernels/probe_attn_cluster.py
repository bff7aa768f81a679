"""Probe (issue 16, written in session 21, not yet run on a GPU): split-KV decode attention
whose splits merge over distributed shared memory, in one launch.

Why: `kern-run bench --ablate` (docs/measurements.md, session 21) puts the decode attention
at 7.1–8.0 µs a layer in the PDL chain, a third of SmolLM2's step; the shipped pair is a
partial kernel (splits write (m, l, acc) to global scratch) plus a reduce kernel, and the
one-launch variant (ABI.md 3a′) merges through a fence, an atomic and the last block
re-reading the partials: both pay a round trip through L2 and a second dependent stage.
Here the C = 8 splits of a (row, kv head) are one thread-block cluster (`__cluster_dims__`,
no runtime change): each block reduces its keys to (M, L, a) per query head in shared
memory, the cluster barrier publishes them, and rank 0 merges the eight through DSMEM and
writes ``out``.  Keys are split evenly over the eight blocks at every context, so it is a
short-context kernel (a row of L keys streams L / 8 keys a block).

Its arguments are the one-launch kernel's without the scratch and ``s_min``: (q, k_cache,
v_cache, kv_lens, block_table, out, q_row_stride, k_stride_slot, k_stride_head,
v_stride_slot, v_stride_head, n_q_heads, n_kv_heads, scale, table_stride); grid (n_kv_heads,
8, tokens), block 128; n_q_heads / n_kv_heads <= 4.

What it prints: the largest error against the float32 reference and against the shipped
two-launch pair (identity and permuted page tables), then µs per call (graph-replayed, no
PDL, like bench.py's ``few splits`` table) for the cluster kernel, the shipped pair at the
generator's splits and torch SDPA, at contexts 144 to 4096.  From the repository root:

    python3 packages/kern-gen/kernels/build.py /tmp/own
    KERN_KERNELS_CUBINS=/tmp/own python3 packages/kern-gen/kernels/probe_attn_cluster.py
"""
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SRC = r"""
#include <cuda_bf16.h>
#include <stdint.h>
#include <math_constants.h>
#include <cooperative_groups.h>

namespace cg = cooperative_groups;
namespace {
constexpr int kThreads = 128;
constexpr int kMaxG = 4;
constexpr int kUnroll = 4;
constexpr int kC = 8;                 // blocks of a cluster = splits of a (row, kv head)
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kPageTokens = 16;
constexpr int kPageShift = 4;

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
__device__ __forceinline__ int64_t slot_offset(int page, int key, int64_t stride) {
    return ((int64_t)page * kPageTokens + (key & (kPageTokens - 1))) * stride;
}

// One block's keys [k_begin, k_end) for the G query heads qh0.. of row t: (M, L, a) per head
// into res_* (M: running max in the log2 domain, -inf for no key; L: the sum of exp2(s - M);
// a: the unnormalised accumulator), the arithmetic of attn_decode.cu's pass.
template <int D, int G>
__device__ __forceinline__ void block_pass(
    const __nv_bfloat16* __restrict__ q, int q_row_stride, const __nv_bfloat16* __restrict__ kp,
    const __nv_bfloat16* __restrict__ vp, const int* __restrict__ table, int64_t kss,
    int64_t vss, int t, int qh0, int k_begin, int k_end, float scale_log2,
    float* sm_m, float* sm_l, float* sm_acc, float* res_m, float* res_l, float* res_a)
{
    constexpr int LPK = D / 8;
    constexpr int NG = kThreads / LPK;
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
        if (sub == 0) { sm_m[kg * kMaxG + h] = m[h]; sm_l[kg * kMaxG + h] = l[h]; }
#pragma unroll
        for (int j = 0; j < 8; ++j) sm_acc[(kg * kMaxG + h) * D + sub * 8 + j] = acc[h][j];
    }
    __syncthreads();
    for (int idx = tid; idx < G * D; idx += kThreads) {
        const int h = idx / D, d = idx % D;
        float M = -CUDART_INF_F;
        for (int g = 0; g < NG; ++g) M = fmaxf(M, sm_m[g * kMaxG + h]);
        float a = 0.f, L = 0.f;
        if (M != -CUDART_INF_F) {
            for (int g = 0; g < NG; ++g) {
                const float mg = sm_m[g * kMaxG + h];
                const float w = (mg == -CUDART_INF_F) ? 0.f : exp2f(mg - M);
                a = fmaf(sm_acc[(g * kMaxG + h) * D + d], w, a);
                L = fmaf(sm_l[g * kMaxG + h], w, L);
            }
        }
        res_a[h * D + d] = a;
        if (d == 0) { res_m[h] = M; res_l[h] = L; }
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
    constexpr int LPK = D / 8;
    constexpr int NG = kThreads / LPK;
    __shared__ float sm_m[NG * kMaxG];
    __shared__ float sm_l[NG * kMaxG];
    __shared__ float sm_acc[NG * kMaxG * D];
    __shared__ float res_m[kMaxG], res_l[kMaxG];
    __shared__ float res_a[kMaxG * D];
    cg::cluster_group cl = cg::this_cluster();

    asm volatile("griddepcontrol.wait;" ::: "memory");
    const int hk = blockIdx.x, rank = blockIdx.y, t = blockIdx.z;   // rank: cluster (1, kC, 1)
    const int group = n_q_heads / n_kv_heads;
    if (gridDim.y != kC || group > kMaxG || group < 1) __trap();
    const int kv_len = kv_lens[t];
    const int chunk = (kv_len + kC - 1) / kC;
    const int k_begin = min(rank * chunk, kv_len), k_end = min(k_begin + chunk, kv_len);
    const int qh0 = hk * group;
    const __nv_bfloat16* kp = k_cache + (int64_t)hk * ksh;
    const __nv_bfloat16* vp = v_cache + (int64_t)hk * vsh;
    const int* table = block_table + (int64_t)t * table_stride;
    const float sl = scale * kLog2e;
    switch (group) {
        case 1: block_pass<D, 1>(q, q_row_stride, kp, vp, table, kss, vss, t, qh0, k_begin, k_end, sl, sm_m, sm_l, sm_acc, res_m, res_l, res_a); break;
        case 2: block_pass<D, 2>(q, q_row_stride, kp, vp, table, kss, vss, t, qh0, k_begin, k_end, sl, sm_m, sm_l, sm_acc, res_m, res_l, res_a); break;
        case 3: block_pass<D, 3>(q, q_row_stride, kp, vp, table, kss, vss, t, qh0, k_begin, k_end, sl, sm_m, sm_l, sm_acc, res_m, res_l, res_a); break;
        default: block_pass<D, 4>(q, q_row_stride, kp, vp, table, kss, vss, t, qh0, k_begin, k_end, sl, sm_m, sm_l, sm_acc, res_m, res_l, res_a); break;
    }
    asm volatile("griddepcontrol.launch_dependents;");
    cl.sync();                         // every block's (M, L, a) is in its shared memory
    if (rank == 0) {
        for (int idx = threadIdx.x; idx < group * D; idx += kThreads) {
            const int h = idx / D, d = idx % D;
            float Ms[kC];
            float M = -CUDART_INF_F;
#pragma unroll
            for (int r = 0; r < kC; ++r) {
                Ms[r] = *cl.map_shared_rank(&res_m[h], r);
                M = fmaxf(M, Ms[r]);
            }
            float a = 0.f, L = 0.f;
#pragma unroll
            for (int r = 0; r < kC; ++r) {
                const float w = (Ms[r] == -CUDART_INF_F) ? 0.f : exp2f(Ms[r] - M);
                a = fmaf(*cl.map_shared_rank(&res_a[h * D + d], r), w, a);
                L = fmaf(*cl.map_shared_rank(&res_l[h], r), w, L);
            }
            out[((int64_t)t * n_q_heads + qh0 + h) * D + d] = __float2bfloat16(a / L);
        }
    }
    cl.sync();                         // rank 0 has read every block's shared memory
}
}  // namespace

#define KERN_CLUSTER_SYMBOL(D)                                                              \
extern "C" __global__ void __cluster_dims__(1, kC, 1) __launch_bounds__(kThreads)           \
kern_attn_decode_cluster_bf16_d##D(                                                         \
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,         \
    const __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ kv_lens,             \
    const int* __restrict__ block_table, __nv_bfloat16* __restrict__ out, int q_row_stride, \
    int64_t kss, int64_t ksh, int64_t vss, int64_t vsh, int n_q_heads, int n_kv_heads,      \
    float scale, int table_stride)                                                          \
{                                                                                           \
    cluster_decode<D>(q, k_cache, v_cache, kv_lens, block_table, out, q_row_stride, kss,    \
                      ksh, vss, vsh, n_q_heads, n_kv_heads, scale, table_stride);           \
}
KERN_CLUSTER_SYMBOL(64)
KERN_CLUSTER_SYMBOL(128)
"""
CLUSTER = 8
NVCC = ["-cubin", "-arch=sm_90", "-O3", "-std=c++17", "-Xptxas=-O3"]


def build(nvcc: str = "nvcc") -> Path:
    """Compile :data:`SRC` to a cubin in a temporary folder (kept for the process)."""
    d = Path(tempfile.mkdtemp(prefix="kern-probe-cluster-"))
    (d / "k.cu").write_text(SRC)
    subprocess.run([nvcc, *NVCC, "k.cu", "-o", "k.cubin"], cwd=d, check=True)
    return d / "k.cubin"


def main() -> None:
    import cupy
    import torch

    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE / "tests"))
    import _own_kernels_gpu as ok   # noqa: E402
    import bench                    # noqa: E402  (timing, paged layers, SDPA, split rule)

    k = ok.Kernels(Path(os.environ["KERN_KERNELS_CUBINS"]))
    mod = cupy.RawModule(path=str(build()))
    print(torch.cuda.get_device_name(0), flush=True)

    def cluster(q, qs, kc, vc, lens, table, out, n_q, n_kv, tokens):
        d = kc.shape[-1]
        f = mod.get_function(f"kern_attn_decode_cluster_bf16_d{d}")
        p = ok.ptr
        f((n_kv, CLUSTER, tokens), (128, 1, 1),
          (p(q), p(kc), p(vc), p(lens), p(table), p(out), np.int32(qs), np.int64(kc.stride(0)),
           np.int64(kc.stride(1)), np.int64(vc.stride(0)), np.int64(vc.stride(1)),
           np.int32(n_q), np.int32(n_kv), np.float32(1 / math.sqrt(d)), np.int32(table.stride(0))))

    g = torch.Generator(device="cuda").manual_seed(5)
    print("\n== correctness: max |cluster - float32 ref|, max |cluster - two-launch| (bf16 out)")
    for n_q, n_kv, d in ((9, 3, 64), (32, 8, 128)):
        S, s_min = bench.GEN_SPLITS[n_kv]
        for ctx in (1, 5, 17, 144, 1000, 4096):
            for permuted in (False, True):
                kc, vc, table = bench.paged_layer(n_kv, d, [ctx], permuted, g)
                _, q, qs = ok.make_q(torch, 1, n_q, n_kv, d, g, "cuda")
                lens = torch.full((1,), ctx, dtype=torch.int32, device="cuda")
                out = torch.full((1, n_q, d), float("nan"), dtype=torch.bfloat16, device="cuda")
                cluster(q, qs, kc, vc, lens, table, out, n_q, n_kv, 1)
                pm, pa, _ = bench.decode_scratch(1, n_q, n_kv, S, d)
                two = torch.empty_like(out)
                k.attn_decode_two_step(q, qs, kc, vc, lens, table, pm, pa, two, n_q, n_kv, S,
                                       1 / math.sqrt(d), 1, s_min=s_min)
                torch.cuda.synchronize()
                # float32 reference over the row's keys in table order
                keys = torch.cat([torch.arange(16, device="cuda") + 16 * int(pg)
                                  for pg in table[0, :ok.pages_for(ctx)].tolist()])[:ctx]
                kf, vf = kc[keys].float(), vc[keys].float()           # [ctx, n_kv, d]
                qf = q.float().reshape(n_q, d)
                kk = kf.repeat_interleave(n_q // n_kv, dim=1)         # [ctx, n_q, d]
                vv = vf.repeat_interleave(n_q // n_kv, dim=1)
                w = torch.softmax(torch.einsum("hd,khd->hk", qf, kk) / math.sqrt(d), dim=-1)
                ref = torch.einsum("hk,khd->hd", w, vv)
                e_ref = (out[0].float() - ref).abs().max().item()
                e_two = (out[0].float() - two[0].float()).abs().max().item()
                print(f"  {n_q}q/{n_kv}kv d{d} ctx {ctx:5d} {'permuted' if permuted else 'identity'}: "
                      f"vs float32 {e_ref:.2e}  vs two-launch {e_two:.2e}  (two-launch vs float32 "
                      f"{(two[0].float() - ref).abs().max().item():.2e})", flush=True)

    print("\n== µs per call (graph-replayed, no PDL), 8 layers rotated: cluster | two launches "
          "(generator's splits) | torch SDPA")
    for n_q, n_kv, d in ((9, 3, 64), (32, 8, 128)):
        S, s_min = bench.GEN_SPLITS[n_kv]
        for ctx in (144, 512, 1024, 4096):
            _, q, qs = ok.make_q(torch, 1, n_q, n_kv, d, g, "cuda")
            lens = torch.full((1,), ctx, dtype=torch.int32, device="cuda")
            out = torch.empty((1, n_q, d), dtype=torch.bfloat16, device="cuda")
            pools = [bench.paged_layer(n_kv, d, [ctx], False, g) for _ in range(8)]
            pm, pa, _ = bench.decode_scratch(1, n_q, n_kv, S, d)
            cl = bench.time_cupy([(lambda c=c: cluster(q, qs, c[0], c[1], lens, c[2], out, n_q,
                                                       n_kv, 1)) for c in pools])
            two = bench.time_cupy([(lambda c=c: k.attn_decode_two_step(
                q, qs, c[0], c[1], lens, c[2], pm, pa, out, n_q, n_kv, S, 1 / math.sqrt(d), 1,
                s_min=s_min)) for c in pools])
            sd = bench.sdpa_decode_us(n_q, n_kv, d, 1, ctx, 8, "decode")
            print(f"  {n_q}q/{n_kv}kv d{d} ctx {ctx:5d}: {cl:7.2f} | {two:7.2f} | "
                  f"{sd if sd is None else round(sd, 2)}", flush=True)
            del pools
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
