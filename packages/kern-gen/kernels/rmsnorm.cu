// kern own kernels: the RMSNorms of the one-row decode step as kern's own launches, over an
// f32 residual stream of kern's own (ABI.md 4g; `kern-gen --own-norm`, the qwen3 default
// since session 27, docs/measurements.md).
//
// Why an own kernel where a mined one exists: every captured norm (Inductor's
// triton_red_fused_..._add_mean_mul_pow_rsqrt_*, one 512-thread block) lets its dependents
// launch only after its final store (SASS PREEXIT right after the last STG), so under PDL the
// GEMV after a norm is launched only once the norm is done and its first weight batch
// (gemv_core.cuh ld_w_first: 40 % of the Qwen3-4B qkv weight) streams while nothing else
// runs; and it reads its row twice (sum of squares, then the normed row).  These launch their
// dependents as soon as they start (PDL below), so the next GEMV's blocks are resident and
// loading W while the norm runs (they read A only after their own wait, i.e. after this grid
// completes), and they hold the row in registers: one pass.
//
// Contract, one block a row (grid (m, 1, 1)), block (32 * ceil(k / 256), 1, 1) threads (each
// owns the 8 elements 8 * threadIdx.x .. + 7 below k); k % 8 == 0, k <= 8192; every pointer
// 16-byte aligned (another block shape, k or alignment traps):
//   kern_rmsnorm_first_bf16(x, g, r, out, k, eps): norm 0, the residual is the bf16 row x:
//     r = f32(x) (the stream starts), out = bf16(g * (r * rsqrt(sum(r^2) / k + eps)));
//   kern_rmsnorm_add_bf16(d, r, g, out, k, eps): r += f32(d) in place (the GEMM output d is
//     the layer's next residual piece), then out as above.
// x, d, g, out bf16 [m, k] (g: [k], the norm weight), r f32 [m, k].  The arithmetic is the
// captured kernels' (f32, one rounding to bf16; Inductor's source in the capture's inductor
// log): only the order of the f32 additions differs (the residual summed piece by piece
// as the layers write it; the squares in each thread's k order, the lanes by xor shuffle,
// the warps in warp order: the same bits on every launch).
//
// PDL: nothing is read before griddepcontrol.wait; the dependents are let launch before it,
// as soon as the norm starts (it launches when the GEMM before it finishes its main loop), so
// the GEMV after it streams its first W batch during that GEMM's epilogue and this norm.
// Safe for a dependent that reads only weights before its wait (every GEMV; kern-gen's
// pdl_order refuses the norm before a step that reads state early): its wait returns only
// after this norm completed, which implies the GEMM before it did (this norm waits before it
// completes).  Measured against the trigger right after the wait (session 27, H100, kern-run
// bench same process, tokens identical; docs/measurements.md): the Qwen3-4B shape 3.225 ->
// 3.193 ms/token.  g, the row and r load together after the wait.
#include <cuda_bf16.h>
#include <stdint.h>

namespace {

constexpr int kMaxThreads = 1024;

__device__ __forceinline__ uint4 ld16(const void* p) {
    uint4 r;
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p) : "memory");
    return r;
}

__device__ __forceinline__ void check_launch(const void* a, const void* b, const void* c,
                                             const void* d, int k) {
    const uintptr_t mis = reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
                          reinterpret_cast<uintptr_t>(c) | reinterpret_cast<uintptr_t>(d);
    if ((k & 7) != 0 || k > 8 * kMaxThreads || blockDim.y != 1 || blockDim.z != 1 ||
        blockDim.x != 32 * ((k + 255) / 256) || (mis & 15) != 0) {
        __trap();
    }
}

__device__ __forceinline__ void to_f32(const uint4& v, float (&f)[8]) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float2 p = __bfloat1622float2(h[e]);
        f[2 * e] = p.x;
        f[2 * e + 1] = p.y;
    }
}

// out[i .. i + 7] = bf16(g * (f * rsqrt(sum of the row's f^2 / k + eps))); every thread of the
// block calls it (one barrier), threads past k with zeros.
__device__ __forceinline__ void normed_store(const float (&f)[8], const uint4& gv,
                                             __nv_bfloat16* out, int i, int k, float eps) {
    __shared__ float warp_sq[kMaxThreads / 32];
    float sq = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) sq = fmaf(f[e], f[e], sq);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    if ((threadIdx.x & 31) == 0) warp_sq[threadIdx.x >> 5] = sq;
    __syncthreads();
    float total = warp_sq[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) total += warp_sq[w];
    const float rstd = rsqrtf(total / (float)k + eps);
    if (i >= k) return;
    const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&gv);
    uint4 o;
    __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float2 w = __bfloat1622float2(g2[e]);
        o2[e] = __floats2bfloat162_rn(w.x * (f[2 * e] * rstd), w.y * (f[2 * e + 1] * rstd));
    }
    *reinterpret_cast<uint4*>(out + i) = o;
}

__device__ __forceinline__ void store_f32(float* p, const float (&f)[8]) {
    *reinterpret_cast<float4*>(p) = make_float4(f[0], f[1], f[2], f[3]);
    *reinterpret_cast<float4*>(p + 4) = make_float4(f[4], f[5], f[6], f[7]);
}

// One row of either kernel: src is x (kAdd false: r = f32(x)) or d (kAdd: r += f32(d)).
// Nothing is read before the wait; the dependents are let launch before it.
template <bool kAdd>
__device__ __forceinline__ void norm_row(const __nv_bfloat16* src, float* r,
                                         const __nv_bfloat16* __restrict__ g,
                                         __nv_bfloat16* out, int k, float eps) {
    check_launch(src, g, r, out, k);
    const int i = 8 * threadIdx.x;
    const size_t row = (size_t)blockIdx.x * k;
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const uint4 gv = i < k ? ld16(g + i) : make_uint4(0, 0, 0, 0);
    float f[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (i < k) {
        to_f32(ld16(src + row + i), f);
        if constexpr (kAdd) {
            const float4 r0 = *reinterpret_cast<const float4*>(r + row + i);
            const float4 r1 = *reinterpret_cast<const float4*>(r + row + i + 4);
            const float rv[8] = {r0.x, r0.y, r0.z, r0.w, r1.x, r1.y, r1.z, r1.w};
#pragma unroll
            for (int e = 0; e < 8; ++e) f[e] = rv[e] + f[e];
        }
        store_f32(r + row + i, f);
    }
    normed_store(f, gv, out + row, i, k, eps);
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kMaxThreads)
kern_rmsnorm_first_bf16(const __nv_bfloat16* x, const __nv_bfloat16* __restrict__ g, float* r,
                        __nv_bfloat16* out, int k, float eps) {
    norm_row<false>(x, r, g, out, k, eps);
}

extern "C" __global__ void __launch_bounds__(kMaxThreads)
kern_rmsnorm_add_bf16(const __nv_bfloat16* d, float* r, const __nv_bfloat16* __restrict__ g,
                      __nv_bfloat16* out, int k, float eps) {
    norm_row<true>(d, r, g, out, k, eps);
}
