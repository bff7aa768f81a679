// kern own kernels: the shared parts of the few-row GEMVs (gemv.cu, gemv_norm.cu): the
// block geometry, the W / A loads, the mma main loop (gemv_tiles) and the stores.  The
// design and contract are gemv.cu's header; ABI.md section 4.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

// Probe builds only (probe_gemv_timeline.py; 0 in the build, where the KERN_TL macros are
// empty): thread 0 of each block reads %globaltimer at six points of the GEMV — entry, first
// batch issued, wait returned, first batch multiplied, main loop done, tile stored — and
// appends one record tagged with w (kern_timeline.cuh): where a GEMV's time goes.
#ifndef KERN_GEMV_TIMELINE
#define KERN_GEMV_TIMELINE 0
#endif
#if KERN_GEMV_TIMELINE
#include "kern_timeline.cuh"
#define KERN_TL(i) kern_tl_stamp<6>(i)
#define KERN_TL_RECORD(w) do { KERN_TL(5); kern_tl_append<6>(w); } while (0)
#else
#define KERN_TL(i) do {} while (0)
#define KERN_TL_RECORD(w) do {} while (0)
#endif

namespace {

constexpr int kCols = 16;       // output columns (W rows) per block: the mma's M
constexpr int kRows = 8;        // rows of A per block: the mma's N
constexpr int kStep = 32;       // k elements per warp step: 4 lanes x 8
constexpr int kUnroll = 4;      // steps per batch in flight
constexpr int kMaxWarps = 16;

// r = 16 bytes at p by the load instruction insn (a string literal), zeros when !ok; the
// optional last argument adds clobbers (": \"memory\"").
#define KERN_LD16(insn, p, ok, r, ...)                                                     \
    asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %5, 0;\n"                            \
                 " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"     \
                 " @q " insn " {%0,%1,%2,%3}, [%4];\n}\n"                                   \
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "r"((int)(ok))      \
                 __VA_ARGS__)

// 16 bytes of W (read-only for every program), zeros when !ok.  .L2::256B asks L2 to fetch the
// aligned 256 bytes around the address: one warp step reads 64 bytes of each of its 16 rows
// and the block's next three warps the following 192, so a row's 256 bytes arrive with one
// request instead of four.  It changes no value, only traffic: on the H200 the Qwen3-4B
// lm_head went from 189.6 to 179.7 us, gate_up 28.8 -> 28.2, down 17.3 -> 16.7 (kernel alone)
// and the decode step 3.095 -> 2.986 ms (kern-run bench lever, same process; tokens identical;
// docs/measurements.md, issue 16, tenth session).
__device__ __forceinline__ uint4 ld_w(const __nv_bfloat16* p, bool ok) {
    uint4 r;
    KERN_LD16("ld.global.nc.L1::no_allocate.L2::256B.v4.u32", p, ok, r);
    return r;
}

// The first W batch, requested before griddepcontrol.wait so that under PDL the weight
// stream starts while the previous kernel still runs.  It must be a coherent ld.global: ptxas
// moves .nc loads freely (the data is read-only for the kernel's life) and placed the wait
// (SASS ACQBULK) before every one of them, so with ld_w here no W byte was requested before
// the previous kernel ended (nvdisasm, session 23).  W is never written by any program, so
// reading it before the wait is safe; the cache hints are ld_w's.  kernels/tests/
// test_prewait.py pins the whole first batch, and nothing else, before the wait.  H100,
// kern-run bench same process, tokens identical (docs/measurements.md, session 24): decode
// SmolLM2 0.596 -> 0.561 ms/token, the Qwen3-4B shape 3.515 -> 3.344.
__device__ __forceinline__ uint4 ld_w_first(const __nv_bfloat16* p, bool ok) {
    uint4 r;
    KERN_LD16("ld.global.L1::no_allocate.L2::256B.v4.u32", p, ok, r);
    return r;
}

// The launch bounds of the one-tile kernels (plain, acc, split3, split-K).  With the first
// batch before the wait ptxas (13.0) gives them 74 registers instead of 56 (the same data,
// live across the wait), one 16-warp block an SM instead of two; asking for two blocks an SM
// keeps them at 64 registers with no spill.  The two-tile (SiLU) kernels spill at that bound
// and keep the plain one (124 registers).
#define KERN_GEMV_BOUNDS_T1 __launch_bounds__(kMaxWarps * 32, 2)

// 16 bytes of A (written by the previous kernel: a coherent load, issued only after
// griddepcontrol.wait; volatile keeps it there), zeros when !ok.
__device__ __forceinline__ uint4 ld_a(const __nv_bfloat16* p, bool ok) {
    uint4 r;
    KERN_LD16("ld.global.v4.u32", p, ok, r, : "memory");
    return r;
}

// 16 bytes of A from global memory (ld_a) or from the block's shared normed rows.
template <bool kShared>
__device__ __forceinline__ uint4 load_a(const __nv_bfloat16* p, bool ok) {
    if constexpr (kShared) {
        return ok ? *reinterpret_cast<const uint4*>(p) : make_uint4(0, 0, 0, 0);
    } else {
        return ld_a(p, ok);
    }
}

// d += W(16 x 16) . A^T(16 x 8); fragments as in the PTX ISA for m16n8k16 .bf16.
__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The main loop of every variant.  Block column tile: W rows base[t] + g and base[t] + g + 8 of
// each of the T tiles (valid below lim[t]); A rows m0 .. m0 + 7.  On return (after
// launch_dependents and a __syncthreads) red[t][mi][col] holds the f32 dot product of A row
// m0 + mi with W row base[t] + col, summed over the warps in warp order.
//
// Norm is a functor: before_wait() runs just before griddepcontrol.wait (weights only), the
// call right after it: NoNorm for the plain variants (A is
// read from global memory at a); gemv_norm.cu's prologues write the block's normed rows into
// shared memory, and a then points there (row stride k, row 0 = A row m0).
struct NoNorm {
    static constexpr bool kShared = false;
    __device__ __forceinline__ void before_wait() const {}
    __device__ __forceinline__ void operator()() const {}
};

//
// ld is the row stride of a and w in elements and k the extent summed (k <= ld): the split-K
// variants (gemv_splitk.cu) pass a and w advanced to their k range; the others ld == k.
// kEarly: launch_dependents right after the wait instead of after the main loop (gemv.cu
// kern_gemv_et_bf16: for a dependent that reads before its own wait).
template <int T, class Norm, bool kEarly = false>
__device__ __forceinline__ void gemv_tiles_ld(const __nv_bfloat16* a,
                                              const __nv_bfloat16* __restrict__ w, int m, int k,
                                              int ld, const int (&base)[T], const int (&lim)[T],
                                              int m0, float (*red)[T][kRows][kCols],
                                              const Norm& norm) {
    KERN_TL(0);
    const int nw = blockDim.x >> 5;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const int steps = (k + kStep - 1) / kStep;
    const bool a_ok = m0 + g < m;
    bool lo_ok[T], hi_ok[T];
    const __nv_bfloat16* wlo[T];
    const __nv_bfloat16* whi[T];
#pragma unroll
    for (int t = 0; t < T; ++t) {
        lo_ok[t] = base[t] + g < lim[t];
        hi_ok[t] = base[t] + g + 8 < lim[t];
        // clamp the rows of absent operands to row 0: their (unissued) addresses stay in range
        wlo[t] = w + (size_t)(lo_ok[t] ? base[t] + g : 0) * ld + 8 * t4;
        whi[t] = w + (size_t)(hi_ok[t] ? base[t] + g + 8 : 0) * ld + 8 * t4;
    }
    const __nv_bfloat16* ap = a + (size_t)(a_ok ? (Norm::kShared ? g : m0 + g) : 0) * ld + 8 * t4;

    uint4 wl[T][kUnroll], wh[T][kUnroll], av[kUnroll];
    float acc0[T][4], acc1[T][4];
#pragma unroll
    for (int t = 0; t < T; ++t) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc0[t][i] = acc1[t][i] = 0.f;
    }

    int s0 = warp;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {           // the first W batch, before the wait
        const int off = (s0 + u * nw) * kStep;
        const bool ok = off + 8 * t4 < k;
#pragma unroll
        for (int t = 0; t < T; ++t) {
            wl[t][u] = ld_w_first(wlo[t] + off, ok && lo_ok[t]);
            wh[t][u] = ld_w_first(whi[t] + off, ok && hi_ok[t]);
        }
    }
    KERN_TL(1);
    norm.before_wait();
    asm volatile("griddepcontrol.wait;" ::: "memory");
    KERN_TL(2);
    if constexpr (kEarly) asm volatile("griddepcontrol.launch_dependents;");
    norm();
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int off = (s0 + u * nw) * kStep;
        av[u] = load_a<Norm::kShared>(ap + off, off + 8 * t4 < k && a_ok);
    }
    for (;;) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
            for (int t = 0; t < T; ++t) {
                mma(acc0[t], wl[t][u].x, wh[t][u].x, wl[t][u].y, wh[t][u].y, av[u].x, av[u].y);
                mma(acc1[t], wl[t][u].z, wh[t][u].z, wl[t][u].w, wh[t][u].w, av[u].z, av[u].w);
            }
        }
#if KERN_GEMV_TIMELINE
        if (s0 == warp) KERN_TL(3);
#endif
        s0 += kUnroll * nw;
        if (s0 >= steps) break;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int off = (s0 + u * nw) * kStep;
            const bool ok = off + 8 * t4 < k;
#pragma unroll
            for (int t = 0; t < T; ++t) {
                wl[t][u] = ld_w(wlo[t] + off, ok && lo_ok[t]);
                wh[t][u] = ld_w(whi[t] + off, ok && hi_ok[t]);
            }
            av[u] = load_a<Norm::kShared>(ap + off, ok && a_ok);
        }
    }
    KERN_TL(4);
    if constexpr (!kEarly) asm volatile("griddepcontrol.launch_dependents;");

    // d[0], d[1]: W row g, A rows 2t, 2t + 1; d[2], d[3]: W row g + 8, the same A rows.
#pragma unroll
    for (int t = 0; t < T; ++t) {
        red[warp][t][2 * t4][g] = acc0[t][0] + acc1[t][0];
        red[warp][t][2 * t4 + 1][g] = acc0[t][1] + acc1[t][1];
        red[warp][t][2 * t4][g + 8] = acc0[t][2] + acc1[t][2];
        red[warp][t][2 * t4 + 1][g + 8] = acc0[t][3] + acc1[t][3];
    }
    __syncthreads();
}

template <int T, class Norm, bool kEarly = false>
__device__ __forceinline__ void gemv_tiles(const __nv_bfloat16* a,
                                           const __nv_bfloat16* __restrict__ w, int m, int k,
                                           const int (&base)[T], const int (&lim)[T], int m0,
                                           float (*red)[T][kRows][kCols], const Norm& norm) {
    gemv_tiles_ld<T, Norm, kEarly>(a, w, m, k, k, base, lim, m0, red, norm);
}

// The warps' partials of tile t, element (mi, col), summed in warp order (deterministic).
template <int T>
__device__ __forceinline__ float warp_sum(float (*red)[T][kRows][kCols], int t, int mi, int col) {
    const int nw = blockDim.x >> 5;
    float s = red[0][t][mi][col];
    for (int v = 1; v < nw; ++v) s += red[v][t][mi][col];
    return s;
}

// The block shape and alignment every variant requires (else trap).
__device__ __forceinline__ void check_launch(const void* a, const void* w, int k) {
    const int nw = blockDim.x >> 5;
    if ((blockDim.x & 31) != 0 || nw > kMaxWarps || blockDim.y != 1 || blockDim.z != 1 ||
        (k & 7) != 0 || ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(w)) & 15)) {
        __trap();
    }
}

// The block's C tile: each dot product rounded once (kern_gemv_bf16's store).  sum(t, mi, col)
// is the f32 dot product of A row m0 + mi with the tile's column col (warp_sum here; the
// split-K kernels' cluster sum).
template <class Sum>
__device__ __forceinline__ void store_plain_by(const Sum& sum, __nv_bfloat16* c, int m, int n,
                                               int m0, int n0) {
    for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) {
        const int mi = i / kCols, col = i % kCols;
        const float s = sum(0, mi, col);
        if (m0 + mi < m && n0 + col < n) {
            c[(size_t)(m0 + mi) * n + n0 + col] = __float2bfloat16_rn(s);
        }
    }
}

__device__ __forceinline__ void store_plain(float (*red)[1][kRows][kCols], __nv_bfloat16* c,
                                            int m, int n, int m0, int n0) {
    store_plain_by([&](int t, int mi, int col) { return warp_sum<1>(red, t, mi, col); },
                   c, m, n, m0, n0);
}

// The block's C tile of SiLU(gate) * up (kern_gemv_silu_bf16's store): the bf16 values the
// unfused GEMM would have stored, then SiLU(g) * u in f32, rounded once.  sum as above, tile
// 0 the gate columns and 1 the up columns.
template <class Sum>
__device__ __forceinline__ void store_silu_by(const Sum& sum, __nv_bfloat16* c, int m, int n,
                                              int m0, int n0) {
    for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) {
        const int mi = i / kCols, col = i % kCols;
        if (m0 + mi < m && n0 + col < n) {
            const float gv = __bfloat162float(__float2bfloat16_rn(sum(0, mi, col)));
            const float uv = __bfloat162float(__float2bfloat16_rn(sum(1, mi, col)));
            const float h = gv / (1.0f + __expf(-gv)) * uv;
            c[(size_t)(m0 + mi) * n + n0 + col] = __float2bfloat16_rn(h);
        }
    }
}

__device__ __forceinline__ void store_silu(float (*red)[2][kRows][kCols], __nv_bfloat16* c,
                                           int m, int n, int m0, int n0) {
    store_silu_by([&](int t, int mi, int col) { return warp_sum<2>(red, t, mi, col); },
                  c, m, n, m0, n0);
}

}  // namespace
