// kern own kernels: the few-row GEMV's main loop with a shared-memory stage (a lever build,
// -D KERN_GEMV_STAGE=1; gemv.cu's plain, early-trigger and SiLU entry points use it there).
//
// Why.  gemv_core.cuh's loop keeps one batch of kUnroll steps per warp in registers: its
// first batch is requested before griddepcontrol.wait, and after the wait nothing new can be
// requested until A has made its round trip (~1 us, probe_gemv_timeline.py's "A+W1") and that
// batch is multiplied, because the next batch needs the same registers.  Behind the wait the
// HBM then idles while A comes back.  Here each warp also owns S steps of shared memory (W and
// A, filled by cp.async, no registers): they are requested right after the wait, together
// with A, so the weight stream goes on during A's round trip; in the main loop the register
// batch and the stage are requested together (kUnroll + S steps in flight per warp).
//
// Contract: gemv_tiles_ld's (gemv_core.cuh) with Norm = NoNorm and ld == k, and the same
// bits: a warp multiplies its steps in the same order (register batch u = 0 .. kUnroll - 1,
// then stage v = 0 .. S - 1, then the next register batch), so every accumulator sees the
// same sequence of mma.  S = the launch's dynamic shared memory / (NW x (2T + 1) x 512 B),
// at most kMaxStage; with no dynamic shared memory S = 0 and this is gemv_tiles_ld's loop.
// Layout per warp and stage step v: T x {W rows g, g + 8} then A, 32 lanes x 16 B each; a
// lane reads back only the 16-byte chunks it copied itself (cp.async.wait_group makes a
// thread's own copies visible to it: no barrier).
#pragma once

#include "gemv_core.cuh"

namespace {

constexpr int kMaxStage = 4;    // stage steps per warp at most
#ifndef KERN_GEMV_STAGE_UNROLL
#define KERN_GEMV_STAGE_UNROLL 3   // 4 spills in the one-tile kernels at their 64 registers
#endif
constexpr int kUnrollS = KERN_GEMV_STAGE_UNROLL;   // steps of the register batch

// 16 bytes global -> shared, asynchronously (L2 only, the 256-byte L2 fetch of ld_w); zeros
// when !ok (src-size 0: nothing is read).
// d: a shared-memory address (32-bit, as the PTX .shared window has it).
__device__ __forceinline__ void cp16(unsigned d, const void* src, bool ok) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n"
                 :: "r"(d), "l"(src), "r"(ok ? 16 : 0) : "memory");
}

// 16 bytes of shared memory at d (volatile: after the cp.async wait, never hoisted above it)
__device__ __forceinline__ uint4 lds16(unsigned d) {
    uint4 r;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(d));
    return r;
}

template <int T>
__device__ __forceinline__ int stage_steps() {
    unsigned dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    const int s = static_cast<int>(dyn / ((blockDim.x >> 5) * (2 * T + 1) * 512u));
    return s < kMaxStage ? s : kMaxStage;
}

template <int T, bool kEarly = false>
__device__ __forceinline__ void gemv_tiles_staged(const __nv_bfloat16* a,
                                                  const __nv_bfloat16* __restrict__ w, int m,
                                                  int k, const int (&base)[T],
                                                  const int (&lim)[T], int m0,
                                                  float (*red)[T][kRows][kCols]) {
    extern __shared__ uint4 kern_gemv_stage[];
    KERN_TL(0);
    const int nw = blockDim.x >> 5;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const int steps = (k + kStep - 1) / kStep;
    const int S = stage_steps<T>();
    const bool a_ok = m0 + g < m;
    bool lo_ok[T], hi_ok[T];
    const __nv_bfloat16* wlo[T];
    const __nv_bfloat16* whi[T];
#pragma unroll
    for (int t = 0; t < T; ++t) {
        lo_ok[t] = base[t] + g < lim[t];
        hi_ok[t] = base[t] + g + 8 < lim[t];
        wlo[t] = w + (size_t)(lo_ok[t] ? base[t] + g : 0) * k + 8 * t4;
        whi[t] = w + (size_t)(hi_ok[t] ? base[t] + g + 8 : 0) * k + 8 * t4;
    }
    const __nv_bfloat16* ap = a + (size_t)(a_ok ? m0 + g : 0) * k + 8 * t4;
    // this lane's 16 bytes of stage step v, operand j (2t, 2t + 1: W lo / hi of tile t;
    // 2T: A) lie at stage + (v * (2T + 1) + j) * 512
    const unsigned stage = static_cast<unsigned>(__cvta_generic_to_shared(kern_gemv_stage)) +
                           (unsigned)((warp * S * (2 * T + 1) * 32 + lane) * 16);

    // the S stage steps from step ss on (stride nw), one cp.async group
    auto issue_stage = [&](int ss) {
#pragma unroll
        for (int v = 0; v < kMaxStage; ++v) {
            if (v < S) {
                const int off = (ss + v * nw) * kStep;
                const bool ok = off + 8 * t4 < k;
                const unsigned p = stage + v * (2 * T + 1) * 512;
#pragma unroll
                for (int t = 0; t < T; ++t) {
                    cp16(p + (2 * t) * 512, wlo[t] + off, ok && lo_ok[t]);
                    cp16(p + (2 * t + 1) * 512, whi[t] + off, ok && hi_ok[t]);
                }
                cp16(p + 2 * T * 512, ap + off, ok && a_ok);
            }
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };

    uint4 wl[T][kUnrollS], wh[T][kUnrollS], av[kUnrollS];
    float acc0[T][4], acc1[T][4];
#pragma unroll
    for (int t = 0; t < T; ++t) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc0[t][i] = acc1[t][i] = 0.f;
    }

    int s0 = warp;
#pragma unroll
    for (int u = 0; u < kUnrollS; ++u) {           // the first W batch, before the wait
        const int off = (s0 + u * nw) * kStep;
        const bool ok = off + 8 * t4 < k;
#pragma unroll
        for (int t = 0; t < T; ++t) {
            wl[t][u] = ld_w_first(wlo[t] + off, ok && lo_ok[t]);
            wh[t][u] = ld_w_first(whi[t] + off, ok && hi_ok[t]);
        }
    }
    KERN_TL(1);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    KERN_TL(2);
    if constexpr (kEarly) asm volatile("griddepcontrol.launch_dependents;");
    if (S > 0) issue_stage(s0 + kUnrollS * nw);
#pragma unroll
    for (int u = 0; u < kUnrollS; ++u) {
        const int off = (s0 + u * nw) * kStep;
        av[u] = ld_a(ap + off, off + 8 * t4 < k && a_ok);
    }
    for (;;) {
#pragma unroll
        for (int u = 0; u < kUnrollS; ++u) {
#pragma unroll
            for (int t = 0; t < T; ++t) {
                mma(acc0[t], wl[t][u].x, wh[t][u].x, wl[t][u].y, wh[t][u].y, av[u].x, av[u].y);
                mma(acc1[t], wl[t][u].z, wh[t][u].z, wl[t][u].w, wh[t][u].w, av[u].z, av[u].w);
            }
        }
#if KERN_GEMV_TIMELINE
        if (s0 == warp) KERN_TL(3);
#endif
        if (S > 0) {
            asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#pragma unroll
            for (int v = 0; v < kMaxStage; ++v) {
                if (v < S) {
                    const unsigned p = stage + v * (2 * T + 1) * 512;
                    const uint4 x = lds16(p + 2 * T * 512);
#pragma unroll
                    for (int t = 0; t < T; ++t) {
                        const uint4 lo = lds16(p + (2 * t) * 512), hi = lds16(p + (2 * t + 1) * 512);
                        mma(acc0[t], lo.x, hi.x, lo.y, hi.y, x.x, x.y);
                        mma(acc1[t], lo.z, hi.z, lo.w, hi.w, x.z, x.w);
                    }
                }
            }
        }
        s0 += (kUnrollS + S) * nw;
        if (s0 >= steps) break;
        if (S > 0) issue_stage(s0 + kUnrollS * nw);   // before the registers fill: fewer live
#pragma unroll
        for (int u = 0; u < kUnrollS; ++u) {
            const int off = (s0 + u * nw) * kStep;
            const bool ok = off + 8 * t4 < k;
#pragma unroll
            for (int t = 0; t < T; ++t) {
                wl[t][u] = ld_w(wlo[t] + off, ok && lo_ok[t]);
                wh[t][u] = ld_w(whi[t] + off, ok && hi_ok[t]);
            }
            av[u] = ld_a(ap + off, ok && a_ok);
        }
    }
    KERN_TL(4);
    if constexpr (!kEarly) asm volatile("griddepcontrol.launch_dependents;");

#pragma unroll
    for (int t = 0; t < T; ++t) {
        red[warp][t][2 * t4][g] = acc0[t][0] + acc1[t][0];
        red[warp][t][2 * t4 + 1][g] = acc0[t][1] + acc1[t][1];
        red[warp][t][2 * t4][g + 8] = acc0[t][2] + acc1[t][2];
        red[warp][t][2 * t4 + 1][g + 8] = acc0[t][3] + acc1[t][3];
    }
    __syncthreads();
}

}  // namespace
