// kern own kernel: one layer's rotary embedding of q and k and its K/V cache writes, from the
// merged qkv rows, in one launch.  See ABI.md 3d.
//
// Why an own kernel: a Llama decode step is bound by launches, not bytes (issue 16).  The
// captured graph spends three small Inductor kernels per layer on this (k rope + K write,
// V write, q rope); kern-gen replaces them by this one where it proves the three are exactly
// that (kern_gen/llama/fuse_rope.py).  The arithmetic is the captured kernels': the element in
// f32, cos/sin of the f32 angle, x·cos + r·sin (attention scaling 1.0), rounded once to bf16.
//
//   qkv    bf16 [tokens, (H + 2·KV)·D]  q | k | v of each row
//   ang    f32  [D/2, tokens]           kern_rope_angles_f32's layout: ang[i·tokens + t]
//   slots  i64  [tokens]                the cache row of each token; negative counts from
//                                       `cache_len` (the captured writers' index semantics)
//   q_out  bf16 [tokens, H·D]           rotated q
//   kc, vc bf16 [cache rows, KV, D]     row slots[t] written: rotated k, v as is
//
// rotate-half: out[d] = x[d]·cos(a) + r[d]·sin(a) with r[d] = −x[d + D/2] for d < D/2, else
// x[d − D/2], and a = ang[(d mod D/2)·tokens + t].  Grid (tokens, 1, 1), block (256, 1, 1).
//
// kern_rope_kv3_bf16 (ABI.md 3d′) is the same computation on q, k, v in three buffers of
// their own ([tokens, H·D], [tokens, KV·D], [tokens, KV·D]): the dynamic programs' (verify)
// q/k/v GEMV writes them so, and their captured rope is two kernels (k rope + K and V
// writes, q rope) rather than three.
#include <cuda_bf16.h>
#include <stdint.h>

#include "rope_core.cuh"

// Programmatic dependent launch (ABI.md, "PDL"): wait for the previous grid (the qkv GEMV)
// before the first memory access; let the next grid start launching at once (it waits on
// this grid's completion itself).  Both are no-ops in a plain launch.
#define KERN_GRID_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define KERN_LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")

// One row t: q, k, v point at its first element of each part.  Shared by both entry points
// so that their arithmetic is one code.
__device__ __forceinline__ void rope_kv_row(const __nv_bfloat16* __restrict__ q,
                                            const __nv_bfloat16* __restrict__ k,
                                            const __nv_bfloat16* __restrict__ v,
                                            const float* __restrict__ ang,
                                            const int64_t* __restrict__ slots,
                                            __nv_bfloat16* __restrict__ q_out,
                                            __nv_bfloat16* __restrict__ kc,
                                            __nv_bfloat16* __restrict__ vc,
                                            int t, int tokens, int heads, int kv_heads,
                                            int head_dim, long long cache_len)
{
    const int half = head_dim >> 1;
    const int nq = heads * head_dim, nk = kv_heads * head_dim;
    KERN_GRID_WAIT();
    KERN_LAUNCH_DEPENDENTS();
    int64_t slot = slots[t];
    if (slot < 0)
        slot += cache_len;
    const bool store = slot >= 0 && slot < cache_len;   // the captured writers assert this
    for (int i = threadIdx.x; i < nq + 2 * nk; i += blockDim.x) {
        if (i >= nq + nk) {
            if (store)
                vc[slot * nk + (i - nq - nk)] = v[i - nq - nk];
            continue;
        }
        const bool is_q = i < nq;
        const __nv_bfloat16* src = is_q ? q : k;
        const int j = is_q ? i : i - nq;            // the element within q or within k
        const int d = j % head_dim;
        const float a = ang[(int64_t)(d % half) * tokens + t];
        const float o = rope_elem(src + (j - d), d, half, a);   // the head's element d
        if (is_q)
            q_out[(int64_t)t * nq + j] = __float2bfloat16_rn(o);
        else if (store)
            kc[slot * nk + j] = __float2bfloat16_rn(o);
    }
}

extern "C" __global__ void __launch_bounds__(256)
kern_rope_kv_bf16(const __nv_bfloat16* __restrict__ qkv,
                  const float* __restrict__ ang,
                  const int64_t* __restrict__ slots,
                  __nv_bfloat16* __restrict__ q_out,
                  __nv_bfloat16* __restrict__ kc,
                  __nv_bfloat16* __restrict__ vc,
                  int tokens,
                  int heads,
                  int kv_heads,
                  int head_dim,
                  long long cache_len)
{
    const int t = blockIdx.x;
    const int nq = heads * head_dim, nk = kv_heads * head_dim;
    const __nv_bfloat16* row = qkv + (int64_t)t * (nq + 2 * nk);
    rope_kv_row(row, row + nq, row + nq + nk, ang, slots, q_out, kc, vc, t, tokens, heads,
                kv_heads, head_dim, cache_len);
}

extern "C" __global__ void __launch_bounds__(256)
kern_rope_kv3_bf16(const __nv_bfloat16* __restrict__ q,
                   const __nv_bfloat16* __restrict__ k,
                   const __nv_bfloat16* __restrict__ v,
                   const float* __restrict__ ang,
                   const int64_t* __restrict__ slots,
                   __nv_bfloat16* __restrict__ q_out,
                   __nv_bfloat16* __restrict__ kc,
                   __nv_bfloat16* __restrict__ vc,
                   int tokens,
                   int heads,
                   int kv_heads,
                   int head_dim,
                   long long cache_len)
{
    const int t = blockIdx.x;
    const int nq = heads * head_dim, nk = kv_heads * head_dim;
    rope_kv_row(q + (int64_t)t * nq, k + (int64_t)t * nk, v + (int64_t)t * nk, ang, slots,
                q_out, kc, vc, t, tokens, heads, kv_heads, head_dim, cache_len);
}
