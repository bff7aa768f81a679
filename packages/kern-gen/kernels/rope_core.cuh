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
    for (int i = 0; i < kRopeMaxPerLane; ++i)
        n[i] = i < per ? __bfloat162float(w[lane + 32 * i]) * (v[i] * r) : 0.0f;
#pragma unroll
    for (int i = 0; i < kRopeMaxPerLane; ++i) {
        if (i >= per)
            break;
        const int d = lane + 32 * i;
        const int ip = d < half ? i + per / 2 : i - per / 2;
        const float rot = d < half ? -n[ip] : n[ip];
        const float a = ang[(int64_t)(d % half) * tokens + t];
        o[i] = __float2bfloat16_rn(rope_rotate(n[i], rot, a));
    }
}

// The folded decode attention's rope split around its grid-dependency wait
// (attn_decode_cluster.cu, KERN_ATTN_ROPE_PREWAIT): before the wait a lane loads what does
// not depend on the previous kernel — its norm weights and its angles (written by the step's
// rope-angle launch, complete once the attention's predecessor has started) — with coherent
// loads (ptxas sinks .nc loads below the wait) and computes their cos / sin; after it only
// the head itself is loaded.  The arithmetic on each element is norm_rope_warp's /
// rope_elem's: the same bits.
struct RopeLane {
    float w[kRopeMaxPerLane];   // norm weight of element d = lane + 32 i (norm variants)
    float c[kRopeMaxPerLane];   // cos / sin of that element's angle
    float s[kRopeMaxPerLane];
};

__device__ __forceinline__ float ld_coherent_f32(const float* p) {
    float v;
    asm volatile("ld.global.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ float ld_coherent_bf16(const __nv_bfloat16* p) {
    unsigned short u;
    asm volatile("ld.global.u16 %0, [%1];" : "=h"(u) : "l"(p));
    return __bfloat162float(__ushort_as_bfloat16(u));
}

// The angle's cos / sin of element d (a = ang[(d mod D/2)·tokens + t]), computed here.
__device__ __forceinline__ void rope_cs(const float* ang, int d, int half, int t, int tokens,
                                        float& c, float& s) {
    const float a = ld_coherent_f32(ang + (int64_t)(d % half) * tokens + t);
    c = cosf(a);
    s = sinf(a);
    asm volatile("" : "+f"(c), "+f"(s));   // computed before the wait that follows
}

// norm_rope_warp's per-lane inputs for a warp's head: w the norm weight (bf16 [D]).
__device__ __forceinline__ void norm_rope_lane(const __nv_bfloat16* w, const float* ang, int t,
                                               int tokens, int head_dim, RopeLane& p) {
    const int lane = threadIdx.x & 31, half = head_dim >> 1, per = head_dim >> 5;
#pragma unroll
    for (int i = 0; i < kRopeMaxPerLane; ++i) {
        if (i >= per)
            break;
        const int d = lane + 32 * i;
        p.w[i] = ld_coherent_bf16(w + d);
        rope_cs(ang, d, half, t, tokens, p.c[i], p.s[i]);
    }
}

// norm_rope_warp with the lane's weights and cos / sin from norm_rope_lane.
__device__ __forceinline__ void norm_rope_warp_lane(const __nv_bfloat16* x, const RopeLane& p,
                                                    int head_dim, float eps,
                                                    __nv_bfloat16 (&o)[kRopeMaxPerLane])
{
    const int lane = threadIdx.x & 31;
    const int half = head_dim >> 1, per = head_dim >> 5;
    float v[kRopeMaxPerLane], ss = 0.0f;
#pragma unroll
    for (int i = 0; i < kRopeMaxPerLane; ++i) {
        v[i] = i < per ? __bfloat162float(x[lane + 32 * i]) : 0.0f;
        ss = fmaf(v[i], v[i], ss);
    }
#pragma unroll
    for (int s = 16; s > 0; s >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, s);
    const float r = rsqrtf(ss / (float)head_dim + eps);
    float n[kRopeMaxPerLane];
#pragma unroll
    for (int i = 0; i < kRopeMaxPerLane; ++i)
        n[i] = i < per ? p.w[i] * (v[i] * r) : 0.0f;
#pragma unroll
    for (int i = 0; i < kRopeMaxPerLane; ++i) {
        if (i >= per)
            break;
        const int d = lane + 32 * i;
        const int ip = d < half ? i + per / 2 : i - per / 2;
        const float rot = d < half ? -n[ip] : n[ip];
        o[i] = __float2bfloat16_rn(fmaf(n[i], p.c[i], rot * p.s[i]));
    }
}

// rope_elem with the angle's cos / sin given.
__device__ __forceinline__ float rope_elem_cs(const __nv_bfloat16* x, int d, int half, float c,
                                              float s) {
    const float r = d < half ? 0.0f - __bfloat162float(x[d + half])
                             : __bfloat162float(x[d - half]);
    return fmaf(__bfloat162float(x[d]), c, r * s);
}
