// kern own kernels: the rotary-embedding arithmetic shared by rope_kv.cu, rope_kv_norm.cu and
// the attention that folds them in (attn_decode_cluster.cu).  One code, so that a folded
// kernel stores and attends to the same bf16 bits as the separate launches (ABI.md 3d, 3e).
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

// rotate-half of one element: x·cos(a) + r·sin(a), r the partner element with its sign (the
// captured kernels' contraction: one FMA after the product r·sin a).
__device__ __forceinline__ float rope_rotate(float x, float r, float a) {
    return fmaf(x, cosf(a), r * sinf(a));
}

// Llama (ABI.md 3d): element d of a head `x` (bf16 [D]), rotated with its angle a.  r =
// 0 − x[d + D/2] for d < D/2, else x[d − D/2] (the captured kernels' negation).
__device__ __forceinline__ float rope_elem(const __nv_bfloat16* x, int d, int half, float a) {
    const float r = d < half ? 0.0f - __bfloat162float(x[d + half])
                             : __bfloat162float(x[d - half]);
    return rope_rotate(__bfloat162float(x[d]), r, a);
}

constexpr int kRopeMaxPerLane = 4;   // D / 32 elements a lane: D <= 128

#ifndef KERN_ROPE_LOADS_FIRST
#define KERN_ROPE_LOADS_FIRST 0
#endif

// Qwen3 (ABI.md 3e): one warp's head x (bf16 [D], D = 64 or 128) RMS-normed with weight w
// and rotated; lane l's outputs o[i] are elements d = l + 32·i, i < D / 32.  All in f32 as
// captured: r = rsqrt(sum x² / D + eps) (FFMA per lane, then an FADD tree), n = w·(x·r),
// out = rope_rotate(n[d], ∓n[d ± D/2], a), a = ang[(d mod D/2)·tokens + t].
__device__ __forceinline__ void norm_rope_warp(const __nv_bfloat16* x,
                                               const __nv_bfloat16* __restrict__ w,
                                               const float* __restrict__ ang, int t,
                                               int tokens, int head_dim, float eps,
                                               __nv_bfloat16 (&o)[kRopeMaxPerLane])
{
    const int lane = threadIdx.x & 31;
    const int half = head_dim >> 1, per = head_dim >> 5;
    // The element and its rotate-half partner d ± D/2 are in the same lane when D/2 is a
    // multiple of 32, i.e. at i ± per/2.
    float v[kRopeMaxPerLane], ss = 0.0f;
#if KERN_ROPE_LOADS_FIRST
    // Session 31's lever (0 in the build): the lane's weights and angles are loaded with x,
    // before any arithmetic.  Loaded where they are used, ptxas issues the angle of element i
    // only after element i - 1's sincos (its slow path branches): an L2 round trip an element
    // (nvdisasm of the build).  Measured only together with the cluster attention's pushed
    // merge at d128 (H100, session 31): the Qwen3-4B shape 3.092 -> 3.131 ms/token with PDL,
    // slower, though the attention alone got faster (q ready 1.54 -> 1.31 us).
    float wv[kRopeMaxPerLane], av[kRopeMaxPerLane];
#pragma unroll
    for (int i = 0; i < kRopeMaxPerLane; ++i) {
        const int d = lane + 32 * i;
        wv[i] = i < per ? __bfloat162float(w[d]) : 0.0f;
        av[i] = i < per ? ang[(int64_t)(d % half) * tokens + t] : 0.0f;
    }
#endif
#pragma unroll
    for (int i = 0; i < kRopeMaxPerLane; ++i) {
        v[i] = i < per ? __bfloat162float(x[lane + 32 * i]) : 0.0f;
        ss = fmaf(v[i], v[i], ss);
    }
#pragma unroll
    for (int s = 16; s > 0; s >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, s);
    const float r = rsqrtf(ss / (float)head_dim + eps);   // D a power of 2: ss / D is exact
    float n[kRopeMaxPerLane];
#pragma unroll
    for (int i = 0; i < kRopeMaxPerLane; ++i) {
#if KERN_ROPE_LOADS_FIRST
        n[i] = i < per ? wv[i] * (v[i] * r) : 0.0f;
#else
        n[i] = i < per ? __bfloat162float(w[lane + 32 * i]) * (v[i] * r) : 0.0f;
#endif
    }
#pragma unroll
    for (int i = 0; i < kRopeMaxPerLane; ++i) {
        if (i >= per)
            break;
        const int d = lane + 32 * i;
        const int ip = d < half ? i + per / 2 : i - per / 2;
        const float rot = d < half ? -n[ip] : n[ip];
#if KERN_ROPE_LOADS_FIRST
        const float a = av[i];
#else
        const float a = ang[(int64_t)(d % half) * tokens + t];
#endif
        o[i] = __float2bfloat16_rn(rope_rotate(n[i], rot, a));
    }
}
