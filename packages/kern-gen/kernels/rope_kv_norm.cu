// kern own kernel: one Qwen3 layer's per-head q/k RMSNorm, rotary embedding of q and k and its
// K/V cache writes, from the merged qkv rows, in one launch.  See ABI.md 3e.
//
// Why an own kernel: a decode step is bound by launches (issue 16).  Qwen3's one-token graph
// spends three Inductor kernels per layer on this (q norm + rope, k norm + rope + K write,
// V write); kern-gen replaces them by this one where it proves the three are exactly that
// (kern_gen/llama/fuse_rope.py).  The arithmetic is the captured kernels' (their Triton
// source is in the capture's inductor log): all in f32, no rounding before the store,
//   r    = rsqrt(sum_d x[d]^2 / D + eps)           per (token, head); MUFU.RSQ, as captured
//   n[d] = w[d] * (x[d] * r)                       w: q_norm / k_norm weight, bf16
//   out  = fma(n[d], cos a, rot[d] * sin a)        rot[d] = -n[d + D/2] (d < D/2), n[d - D/2]
// with a = ang[(d mod D/2)·tokens + t], rounded once to bf16.
//
//   qkv    bf16 [tokens, (H + 2·KV)·D]  q | k | v of each row
//   q_w    bf16 [D], k_w bf16 [D]       the layer's q_norm / k_norm weights
//   ang    f32  [D/2, tokens]           kern_rope_angles_f32's layout
//   slots  i64  [tokens]                cache row of each token; negative counts from cache_len
//   q_out  bf16 [tokens, H·D]           normed, rotated q
//   kc, vc bf16 [cache rows, KV, D]     row slots[t]: normed rotated k, v as is
//
// One warp per head of the row's H + 2·KV heads (q heads, then k, then v), 8 warps a block:
// grid (tokens, ceil((H + 2·KV) / 8), 1), block (256, 1, 1).  D must be 64 or 128.  A warp
// reads its whole head into registers before it writes, and no other warp touches that head:
// q_out may be q itself (in place).
//
// kern_rope_kv3_norm_bf16 (ABI.md 3e′) is the same computation (one device function) on q, k,
// v in three buffers of their own ([tokens, H·D], [tokens, KV·D], [tokens, KV·D]): Qwen3's
// dynamic programs (verify), whose captured graph spends six kernels a layer on it (q and k
// variance, q and k sin halves, k cos half + K/V writes, q cos half in place).  Unlike those,
// the sin half is not rounded to bf16 before the add: the result is the one-token graph's
// arithmetic, so that verify and decode agree.
#include <cuda_bf16.h>
#include <stdint.h>

#include "rope_core.cuh"

#define KERN_GRID_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define KERN_LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")

// One (row t, head) of the warp: q_row, k_row, v_row point at row t's q, k and v.
__device__ __forceinline__ void rope_kv_norm_head(const __nv_bfloat16* q_row,
                       const __nv_bfloat16* k_row,
                       const __nv_bfloat16* __restrict__ v_row,
                       const __nv_bfloat16* __restrict__ q_w,
                       const __nv_bfloat16* __restrict__ k_w,
                       const float* __restrict__ ang,
                       const int64_t* __restrict__ slots,
                       __nv_bfloat16* q_out,
                       __nv_bfloat16* __restrict__ kc,
                       __nv_bfloat16* __restrict__ vc,
                       int t,
                       int tokens,
                       int heads,
                       int kv_heads,
                       int head_dim,
                       long long cache_len,
                       float eps)
{
    const int lane = threadIdx.x & 31;
    const int head = blockIdx.y * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int nq = heads * head_dim, nk = kv_heads * head_dim;
    const int per = head_dim >> 5;
    KERN_GRID_WAIT();
    KERN_LAUNCH_DEPENDENTS();
    if (head >= heads + 2 * kv_heads || (head_dim != 64 && head_dim != 128))
        return;
    int64_t slot = slots[t];
    if (slot < 0)
        slot += cache_len;
    const bool store = slot >= 0 && slot < cache_len;   // the captured writers assert this
    if (head >= heads + kv_heads) {                      // a V head: copied as is
        const __nv_bfloat16* x = v_row + (head - heads - kv_heads) * head_dim;
        if (store)
            for (int d = lane; d < head_dim; d += 32)
                vc[slot * nk + (head - heads - kv_heads) * head_dim + d] = x[d];
        return;
    }
    const bool is_q = head < heads;
    const __nv_bfloat16* x = is_q ? q_row + head * head_dim : k_row + (head - heads) * head_dim;
    __nv_bfloat16 o[kRopeMaxPerLane];
    norm_rope_warp(x, is_q ? q_w : k_w, ang, t, tokens, head_dim, eps, o);
#pragma unroll
    for (int i = 0; i < kRopeMaxPerLane; ++i) {
        if (i >= per)
            break;
        const int d = lane + 32 * i;
        if (is_q)
            q_out[(int64_t)t * nq + head * head_dim + d] = o[i];
        else if (store)
            kc[slot * nk + (head - heads) * head_dim + d] = o[i];
    }
}

extern "C" __global__ void __launch_bounds__(256)
kern_rope_kv_norm_bf16(const __nv_bfloat16* __restrict__ qkv,
                       const __nv_bfloat16* __restrict__ q_w,
                       const __nv_bfloat16* __restrict__ k_w,
                       const float* __restrict__ ang,
                       const int64_t* __restrict__ slots,
                       __nv_bfloat16* __restrict__ q_out,
                       __nv_bfloat16* __restrict__ kc,
                       __nv_bfloat16* __restrict__ vc,
                       int tokens,
                       int heads,
                       int kv_heads,
                       int head_dim,
                       long long cache_len,
                       float eps)
{
    const int t = blockIdx.x;
    const int nq = heads * head_dim, nk = kv_heads * head_dim;
    const __nv_bfloat16* row = qkv + (int64_t)t * (nq + 2 * nk);
    rope_kv_norm_head(row, row + nq, row + nq + nk, q_w, k_w, ang, slots, q_out, kc, vc, t,
                      tokens, heads, kv_heads, head_dim, cache_len, eps);
}

// q_out may alias q (the captured q cos half writes q in place): no __restrict__ on either.
extern "C" __global__ void __launch_bounds__(256)
kern_rope_kv3_norm_bf16(const __nv_bfloat16* q,
                        const __nv_bfloat16* __restrict__ k,
                        const __nv_bfloat16* __restrict__ v,
                        const __nv_bfloat16* __restrict__ q_w,
                        const __nv_bfloat16* __restrict__ k_w,
                        const float* __restrict__ ang,
                        const int64_t* __restrict__ slots,
                        __nv_bfloat16* q_out,
                        __nv_bfloat16* __restrict__ kc,
                        __nv_bfloat16* __restrict__ vc,
                        int tokens,
                        int heads,
                        int kv_heads,
                        int head_dim,
                        long long cache_len,
                        float eps)
{
    const int t = blockIdx.x;
    const int nq = heads * head_dim, nk = kv_heads * head_dim;
    rope_kv_norm_head(q + (int64_t)t * nq, k + (int64_t)t * nk, v + (int64_t)t * nk, q_w, k_w,
                      ang, slots, q_out, kc, vc, t, tokens, heads, kv_heads, head_dim,
                      cache_len, eps);
}
