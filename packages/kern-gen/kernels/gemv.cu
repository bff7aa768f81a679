// kern own kernels: bf16 GEMV for few rows (m <= 8 per block), an alternative implementation
// of the manifest GEMM kernel `C[m, n] = A[m, k] . W[n, k]^T` (the `extern:cublaslt_bf16_tn`
// interface).  See ABI.md section 4.
//
// Why an own kernel (the exception to mining): at m = 1 (decode) and m = k + 1 (speculative
// verify) a GEMM is a stream over the weights, and cuBLASLt leaves HBM bandwidth on the table
// there (an H200 probe: Qwen3-4B qkv n 6144 k 2560 at m = 1, 11.33 us through cuBLAS vs 8.40 us
// for a PDL GEMV), plus it cannot start its weight loads before the previous kernel ends.
//
// Contract, kern_gemv_bf16(a, w, c, m, n, k):
//   a bf16 [m, k] row-major, w bf16 [n, k] row-major (one row per output column), c bf16
//   [m, n] row-major; f32 accumulation, c rounded to nearest even.  k % 8 == 0; a and w
//   16-byte aligned (rows are k elements, so every row is too); c 2-byte aligned.
//   grid (ceil(n / 16), ceil(m / 8), 1), block (32 * NW, 1, 1) with 1 <= NW <= 16 warps
//   (another block shape, k % 8 != 0 or a misaligned a / w traps); no dynamic shared memory.
//   Any m >= 1 is correct (grid.y blocks of 8 rows each re-read W).
//   Nothing outside a[0 .. m*k), w[0 .. n*k) is read, nothing outside c[0 .. m*n) written.
//
// Shapes it is meant for (decode / verify GEMMs): Qwen3-4B qkv n 6144 k 2560, o 2560 x 4096,
// gate_up 19456 x 2560, down 2560 x 9728, lm_head 151936 x 2560; SmolLM2-135M qkv 960 x 576,
// o 576 x 576, gate_up 3072 x 576, down 576 x 1536, lm_head 49152 x 576 (and the unmerged
// q / k / v / gate / up rows of the verify program).
//
// Design.  Block (x, y) owns the 16 output columns n0 = 16x .. n0 + 15 (W rows) and the 8 rows
// m0 = 8y .. m0 + 7 of A; its NW warps split k in steps of 32 elements (warp w takes steps
// w, w + NW, w + 2 NW, ...).  A step is one 16 x 32 W tile times a 32 x 8 tile of A^T: two
// mma.sync.m16n8k16 (bf16 in, f32 accumulate), W as the 16-row operand, A as the 8-column
// one (rows of A beyond m are zeros).  Lane (g = lane / 4, t = lane % 4) loads 16 bytes
// (8 consecutive k) of W rows n0 + g and n0 + g + 8 and of A row m0 + g, all at k offset
// 32 s + 8 t: since k is summed over, any assignment of real k indices to the mma's k slots
// is correct as long as W and A agree, so the 16-byte vectors feed the fragments directly
// (no shared memory, no shuffles, no conversion).  W loads are ld.global.nc.L1::no_allocate
// with a 256-byte L2 fetch (W is never written by any program); a batch of kUnroll = 4 steps
// is in flight per warp: 8 W + 4 A 16-byte loads per thread, 4 KB of W per warp.  Two accumulator sets (the two mmas of a
// step) halve the mma dependency chain.  The warps' partial tiles are summed through shared
// memory in warp order: deterministic, no atomics, the same bits on every launch with the
// same block size (each C element is its own dot product: a row's result does not depend on
// m or on the other rows).
//
// Two fused variants share the main loop (kern-gen applies them with --gemm gemv; the
// reason for each is the launches it saves, docs/measurements.md issue 16):
//   kern_gemv_silu_bf16(a, w, c, m, n, k): w bf16 [2n, k] = [gate; up] rows (the merged
//     gate_up weight), c bf16 [m, n] = silu(a.Wg^T) * (a.Wu^T).  Block x computes gate
//     columns 16x .. 16x + 15 and the same up columns (two 16-row W tiles per step).  Each
//     dot product is rounded to bf16 first (the bits the separate GEMM would have stored),
//     then silu(g) * u is computed in f32 and rounded once: it replaces a gate_up GEMM and the
//     captured SiLU*mul kernel (decode), or two GEMMs and that kernel (verify, draft).
//   kern_gemv_split3_bf16(a, w, c0, c1, c2, m, n0, n1, n2, k): w [n0 + n1 + n2, k] (the
//     merged qkv weight), output column j goes to c0 [m, n0] (j < n0), c1 [m, n1] or
//     c2 [m, n2], each with its own row stride: one launch for the q, k and v GEMMs of a
//     many-row program whose captured readers expect unmerged [rows, n_part] outputs.
//     n0 and n1 are multiples of 16 (a block's columns lie in one part), else it traps.
//   kern_gemv_acc_bf16(a, w, c, m, n, k): c [m, n] += a . w^T in place (the interface of
//     `extern:cublaslt_bf16_tn_acc`, beta = 1): each dot product in f32 plus the old c
//     element in f32, rounded once, as cuBLASLt's D = A.B + C.  DSpark's tap projections
//     (4 or 8 accumulating GEMMs a verify) and its Markov head (one a draft row).
//   All compute every dot product exactly as kern_gemv_bf16 with the same NW does.
//
// Four more carry an RMSNorm between them (ABI.md 4e; `kern-gen --fuse-norm`, an option:
// measured no faster, docs/measurements.md issue 16, session 20), over an f32 residual
// stream r [m, k] and its sums of squares by 16-column block, parts [m, p]:
//   kern_gemv_res_bf16(a, w, r, parts, m, n, k): kern_gemv_bf16's d = bf16(a . w^T), then
//     r += f32(d) in place and parts[i, blockIdx.x] = the block's sum of r^2 (d not stored);
//   kern_gemv_rnorm_bf16 / kern_gemv_rnorm_silu_bf16(r, parts, g, w, c, m, n, k, p, eps):
//     A = bf16(g * (r * rsqrt(sum(parts) / k + eps))) in the prologue, then kern_gemv_bf16 /
//     kern_gemv_silu_bf16 of that A;
//   kern_gemv_norm_bf16(x, g, xo, w, c, m, n, k, eps): norm 0, the bf16 row x is the
//     residual: the block sums the squares, block 0 stores xo = f32(x), then the GEMV.
// The arithmetic is the captured Inductor norm kernels' (f32, one rounding); every block
// computes the same A into shared memory (at most 8192 elements, k <= 4096, else trap).
//
// Programmatic dependent launch: the first batch of W is requested before
// `griddepcontrol.wait` (weights are never written, so reading them while the previous kernel
// still runs is safe); A is read and C written only after it; `launch_dependents` follows
// the main loop.  Both are no-ops without PDL.
#include <cuda_bf16.h>
#include <stdint.h>

namespace {

constexpr int kCols = 16;       // output columns (W rows) per block: the mma's M
constexpr int kRows = 8;        // rows of A per block: the mma's N
constexpr int kStep = 32;       // k elements per warp step: 4 lanes x 8
constexpr int kUnroll = 4;      // steps per batch in flight
constexpr int kMaxWarps = 16;
constexpr int kNormElems = 8192;  // A elements a norm-prologue block holds (16 KB of bf16)
constexpr int kNormMaxK = 4096;   // norm weight elements it stages in shared memory (8 KB)

// 16 bytes of W (read-only for every program), zeros when !ok.  .L2::256B asks L2 to fetch the
// aligned 256 bytes around the address: one warp step reads 64 bytes of each of its 16 rows
// and the block's next three warps the following 192, so a row's 256 bytes arrive with one
// request instead of four.  It changes no value, only traffic: on the H200 the Qwen3-4B
// lm_head went from 189.6 to 179.7 us, gate_up 28.8 -> 28.2, down 17.3 -> 16.7 (kernel alone)
// and the decode step 3.095 -> 2.986 ms (kern-run bench lever, same process; tokens identical;
// docs/measurements.md, issue 16, tenth session).
__device__ __forceinline__ uint4 ld_w(const __nv_bfloat16* p, bool ok) {
    uint4 r;
    asm volatile(
        "{\n .reg .pred q;\n setp.ne.b32 q, %5, 0;\n"
        " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
        " @q ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n}\n"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "r"((int)ok));
    return r;
}

// 16 bytes of A (written by the previous kernel: a coherent load, issued only after
// griddepcontrol.wait; volatile keeps it there), zeros when !ok.
__device__ __forceinline__ uint4 ld_a(const __nv_bfloat16* p, bool ok) {
    uint4 r;
    asm volatile(
        "{\n .reg .pred q;\n setp.ne.b32 q, %5, 0;\n"
        " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
        " @q ld.global.v4.u32 {%0,%1,%2,%3}, [%4];\n}\n"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "r"((int)ok) : "memory");
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
// read from global memory at a); NormPrologue writes the block's normed rows into shared
// memory, and a then points there (row stride k, row 0 = A row m0).
struct NoNorm {
    static constexpr bool kShared = false;
    __device__ __forceinline__ void before_wait() const {}
    __device__ __forceinline__ void operator()() const {}
};

template <int T, class Norm>
__device__ __forceinline__ void gemv_tiles(const __nv_bfloat16* a,
                                           const __nv_bfloat16* __restrict__ w, int m, int k,
                                           const int (&base)[T], const int (&lim)[T], int m0,
                                           float (*red)[T][kRows][kCols], const Norm& norm) {
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
        wlo[t] = w + (size_t)(lo_ok[t] ? base[t] + g : 0) * k + 8 * t4;
        whi[t] = w + (size_t)(hi_ok[t] ? base[t] + g + 8 : 0) * k + 8 * t4;
    }
    const __nv_bfloat16* ap = a + (size_t)(a_ok ? (Norm::kShared ? g : m0 + g) : 0) * k + 8 * t4;

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
            wl[t][u] = ld_w(wlo[t] + off, ok && lo_ok[t]);
            wh[t][u] = ld_w(whi[t] + off, ok && hi_ok[t]);
        }
    }
    norm.before_wait();
    asm volatile("griddepcontrol.wait;" ::: "memory");
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
    asm volatile("griddepcontrol.launch_dependents;");

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

// The block's C tile: each dot product rounded once (kern_gemv_bf16's store).
__device__ __forceinline__ void store_plain(float (*red)[1][kRows][kCols], __nv_bfloat16* c,
                                            int m, int n, int m0, int n0) {
    for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) {
        const int mi = i / kCols, col = i % kCols;
        const float s = warp_sum<1>(red, 0, mi, col);
        if (m0 + mi < m && n0 + col < n) {
            c[(size_t)(m0 + mi) * n + n0 + col] = __float2bfloat16_rn(s);
        }
    }
}

// The block's C tile of SiLU(gate) * up (kern_gemv_silu_bf16's store): the bf16 values the
// unfused GEMM would have stored, then SiLU(g) * u in f32, rounded once.
__device__ __forceinline__ void store_silu(float (*red)[2][kRows][kCols], __nv_bfloat16* c,
                                           int m, int n, int m0, int n0) {
    for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) {
        const int mi = i / kCols, col = i % kCols;
        if (m0 + mi < m && n0 + col < n) {
            const float gv = __bfloat162float(__float2bfloat16_rn(warp_sum<2>(red, 0, mi, col)));
            const float uv = __bfloat162float(__float2bfloat16_rn(warp_sum<2>(red, 1, mi, col)));
            const float h = gv / (1.0f + __expf(-gv)) * uv;
            c[(size_t)(m0 + mi) * n + n0 + col] = __float2bfloat16_rn(h);
        }
    }
}

// The RMSNorm prologues (ABI.md 4e), run by every thread of the block after the
// grid-dependency wait; each fills xs [rows, k] with the block's normed rows
// A = bf16(g * (r * rsqrt(sum(r^2) / k + eps))) (Inductor's arithmetic: f32, one rounding)
// and ends with __syncthreads.  The norm weight g (never written by any program) is copied
// into gs by cp.async before the wait (before_wait); each thread copies exactly the elements
// it reads later, so its own cp.async.wait_all is all the ordering it needs.
__device__ __forceinline__ void copy_g(const __nv_bfloat16* g, __nv_bfloat16* gs, int k) {
    for (int i = 8 * threadIdx.x; i < k; i += 8 * blockDim.x) {
        const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(gs + i));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(g + i)
                     : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// xs[row, i .. i + 7] = bf16(g * (r * rstd)) for the 8 f32 values r of that row.
__device__ __forceinline__ void store_normed(__nv_bfloat16* p, const float (&r)[8], float rstd,
                                             const __nv_bfloat16* gp) {
    const uint4 gv = *reinterpret_cast<const uint4*>(gp);
    const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&gv);
    uint4 out;
    __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float2 w = __bfloat1622float2(g2[e]);
        o2[e] = __floats2bfloat162_rn(w.x * (r[2 * e] * rstd), w.y * (r[2 * e + 1] * rstd));
    }
    *reinterpret_cast<uint4*>(p) = out;
}

// Norm 0 (kern_gemv_norm_bf16): the residual is the bf16 row x itself; the block sums the
// squares (each thread's elements in k order, the lanes by xor shuffle, the warps in warp
// order: the same bits in every block) and block x == 0 stores r = f32(x) into xo, the f32
// residual stream the later GEMVs update in place.
struct NormPrologue {
    static constexpr bool kShared = true;
    const __nv_bfloat16* x;
    const __nv_bfloat16* g;
    float* xo;
    __nv_bfloat16* xs;
    __nv_bfloat16* gs;
    float (*ss)[kRows];       // [kMaxWarps][kRows] shared scratch
    int m, k, m0;
    float eps;

    __device__ __forceinline__ void before_wait() const { copy_g(g, gs, k); }

    __device__ __forceinline__ void operator()() const {
        const int rows = min(kRows, m - m0);
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
        for (int r = 0; r < rows; ++r) {
            const size_t row = (size_t)(m0 + r) * k;
            float sq = 0.f;
            for (int i = 8 * threadIdx.x; i < k; i += 8 * blockDim.x) {
                const uint4 xv = *reinterpret_cast<const uint4*>(x + row + i);
                const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xv);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 f = __bfloat1622float2(x2[e]);
                    sq = fmaf(f.x, f.x, sq);
                    sq = fmaf(f.y, f.y, sq);
                }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
            if (lane == 0) ss[warp][r] = sq;
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads();
        for (int r = 0; r < rows; ++r) {
            float t = ss[0][r];
            for (int v = 1; v < nw; ++v) t += ss[v][r];
            const float rstd = rsqrtf(t / (float)k + eps);
            const size_t row = (size_t)(m0 + r) * k;
            for (int i = 8 * threadIdx.x; i < k; i += 8 * blockDim.x) {
                const uint4 xv = *reinterpret_cast<const uint4*>(x + row + i);
                const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xv);
                float f[8];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 v = __bfloat1622float2(x2[e]);
                    f[2 * e] = v.x;
                    f[2 * e + 1] = v.y;
                }
                if (blockIdx.x == 0) {
                    *reinterpret_cast<float4*>(xo + row + i) = make_float4(f[0], f[1], f[2], f[3]);
                    *reinterpret_cast<float4*>(xo + row + i + 4) = make_float4(f[4], f[5], f[6], f[7]);
                }
                store_normed(xs + (size_t)r * k + i, f, rstd, gs + i);
            }
        }
        __syncthreads();
    }
};

// Norms t > 0 (kern_gemv_rnorm_bf16 / _silu): the f32 residual row r and its sum of squares
// in p partial sums (written by the kern_gemv_res_bf16 before, one per block of 16 columns);
// every warp adds the partials itself (lane j takes j, j + 32, ...; then the xor shuffle),
// so no barrier stands between the loads and the normed row.
struct RNormPrologue {
    static constexpr bool kShared = true;
    const float* r;
    const float* parts;       // [m, p]
    const __nv_bfloat16* g;
    __nv_bfloat16* xs;
    __nv_bfloat16* gs;
    int m, k, m0, p;
    float eps;

    __device__ __forceinline__ void before_wait() const { copy_g(g, gs, k); }

    __device__ __forceinline__ void operator()() const {
        const int rows = min(kRows, m - m0);
        const int lane = threadIdx.x & 31;
        asm volatile("cp.async.wait_all;" ::: "memory");
        for (int q = 0; q < rows; ++q) {
            const size_t row = (size_t)(m0 + q) * k;
            float t = 0.f;
            for (int j = lane; j < p; j += 32) t += parts[(size_t)(m0 + q) * p + j];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
            const float rstd = rsqrtf(t / (float)k + eps);
            for (int i = 8 * threadIdx.x; i < k; i += 8 * blockDim.x) {
                const float4 a = *reinterpret_cast<const float4*>(r + row + i);
                const float4 b = *reinterpret_cast<const float4*>(r + row + i + 4);
                const float f[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
                store_normed(xs + (size_t)q * k + i, f, rstd, gs + i);
            }
        }
        __syncthreads();
    }
};

// kern_gemv_res_bf16's prefetch: right after the wait, thread i < 128 of the block loads the
// residual element its epilogue updates (row m0 + i / 16, column n0 + i % 16), off the
// critical path at the end.
struct ResPrefetch {
    static constexpr bool kShared = false;
    const float* r;
    float* out;               // the thread's register, through the inlined pointer
    int m, n, m0, n0;
    __device__ __forceinline__ void before_wait() const {}
    __device__ __forceinline__ void operator()() const {
        const int i = threadIdx.x, mi = i / kCols, col = i % kCols;
        *out = (i < kRows * kCols && m0 + mi < m && n0 + col < n)
                   ? r[(size_t)(m0 + mi) * n + n0 + col] : 0.f;
    }
};

// The norm variants' extra requirements (else trap): 16-byte aligned operands, the block's
// rows of A and g fit the shared buffers.
__device__ __forceinline__ void check_norm(const void* x, const void* g, const void* xo, int m,
                                           int k, int m0) {
    const uintptr_t any = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(g) |
                          reinterpret_cast<uintptr_t>(xo);
    if ((any & 15) || min(kRows, m - m0) * k > kNormElems || k > kNormMaxK) __trap();
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
kern_gemv_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
               __nv_bfloat16* c, int m, int n, int k) {
    __shared__ float red[kMaxWarps][1][kRows][kCols];
    check_launch(a, w, k);
    const int n0 = blockIdx.x * kCols, m0 = blockIdx.y * kRows;
    if (n0 >= n || m0 >= m) return;                // block-uniform
    const int base[1] = {n0}, lim[1] = {n};
    gemv_tiles<1>(a, w, m, k, base, lim, m0, red, NoNorm{});
    store_plain(red, c, m, n, m0, n0);
}

extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
kern_gemv_silu_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                    __nv_bfloat16* c, int m, int n, int k) {
    __shared__ float red[kMaxWarps][2][kRows][kCols];
    check_launch(a, w, k);
    const int n0 = blockIdx.x * kCols, m0 = blockIdx.y * kRows;
    if (n0 >= n || m0 >= m) return;                // block-uniform
    // gate rows n0 .. (below n), up rows n + n0 .. (below 2n)
    const int base[2] = {n0, n + n0}, lim[2] = {n, 2 * n};
    gemv_tiles<2>(a, w, m, k, base, lim, m0, red, NoNorm{});
    store_silu(red, c, m, n, m0, n0);
}

// ABI.md 4e: norm 0 (the bf16 residual x) in the prologue, then kern_gemv_bf16; block 0
// stores the f32 residual into xo.
extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
kern_gemv_norm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* __restrict__ g, float* xo,
                    const __nv_bfloat16* __restrict__ w, __nv_bfloat16* c, int m, int n, int k,
                    float eps) {
    __shared__ float red[kMaxWarps][1][kRows][kCols];
    __shared__ float ss[kMaxWarps][kRows];
    __shared__ __align__(16) __nv_bfloat16 xs[kNormElems];
    __shared__ __align__(16) __nv_bfloat16 gs[kNormMaxK];
    check_launch(x, w, k);
    const int n0 = blockIdx.x * kCols, m0 = blockIdx.y * kRows;
    if (n0 >= n || m0 >= m) return;                // block-uniform
    check_norm(x, g, xo, m, k, m0);
    const int base[1] = {n0}, lim[1] = {n};
    gemv_tiles<1>(xs, w, m, k, base, lim, m0, red,
                  NormPrologue{x, g, xo, xs, gs, ss, m, k, m0, eps});
    store_plain(red, c, m, n, m0, n0);
}

// ABI.md 4e: the normed f32 residual r (sum of squares from p partials) in the prologue,
// then kern_gemv_bf16 (Silu: kern_gemv_silu_bf16, w = [gate; up] rows).
template <bool Silu>
__device__ __forceinline__ void gemv_rnorm(const float* r, const float* parts,
                                           const __nv_bfloat16* __restrict__ g,
                                           const __nv_bfloat16* __restrict__ w,
                                           __nv_bfloat16* c, int m, int n, int k, int p,
                                           float eps) {
    constexpr int T = Silu ? 2 : 1;
    __shared__ float red[kMaxWarps][T][kRows][kCols];
    __shared__ __align__(16) __nv_bfloat16 xs[kNormElems];
    __shared__ __align__(16) __nv_bfloat16 gs[kNormMaxK];
    check_launch(r, w, k);
    const int n0 = blockIdx.x * kCols, m0 = blockIdx.y * kRows;
    if (n0 >= n || m0 >= m) return;                // block-uniform
    check_norm(r, g, parts, m, k, m0);
    const RNormPrologue pro{r, parts, g, xs, gs, m, k, m0, p, eps};
    if constexpr (Silu) {
        const int base[2] = {n0, n + n0}, lim[2] = {n, 2 * n};
        gemv_tiles<2>(xs, w, m, k, base, lim, m0, red, pro);
        store_silu(red, c, m, n, m0, n0);
    } else {
        const int base[1] = {n0}, lim[1] = {n};
        gemv_tiles<1>(xs, w, m, k, base, lim, m0, red, pro);
        store_plain(red, c, m, n, m0, n0);
    }
}

extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
kern_gemv_rnorm_bf16(const float* r, const float* parts, const __nv_bfloat16* __restrict__ g,
                     const __nv_bfloat16* __restrict__ w, __nv_bfloat16* c, int m, int n,
                     int k, int p, float eps) {
    gemv_rnorm<false>(r, parts, g, w, c, m, n, k, p, eps);
}

extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
kern_gemv_rnorm_silu_bf16(const float* r, const float* parts,
                          const __nv_bfloat16* __restrict__ g,
                          const __nv_bfloat16* __restrict__ w, __nv_bfloat16* c, int m, int n,
                          int k, int p, float eps) {
    gemv_rnorm<true>(r, parts, g, w, c, m, n, k, p, eps);
}

// ABI.md 4e: d = bf16(a . w^T) (kern_gemv_bf16's bits) is added to the f32 residual r in place,
// r[i, j] += f32(d[i, j]), and the block's 16-column sum of squares of the new r goes to
// parts[i, blockIdx.x] (the 16 lanes of a row by xor shuffle: fixed order).  d itself is not
// stored.  Needs a block of at least 128 threads (else trap).
extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
kern_gemv_res_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w, float* r,
                   float* parts, int m, int n, int k) {
    __shared__ float red[kMaxWarps][1][kRows][kCols];
    check_launch(a, w, k);
    if (blockDim.x < kRows * kCols || ((reinterpret_cast<uintptr_t>(r) |
                                        reinterpret_cast<uintptr_t>(parts)) & 3)) __trap();
    const int n0 = blockIdx.x * kCols, m0 = blockIdx.y * kRows;
    if (n0 >= n || m0 >= m) return;                // block-uniform
    float old = 0.f;
    const int base[1] = {n0}, lim[1] = {n};
    gemv_tiles<1>(a, w, m, k, base, lim, m0, red, ResPrefetch{r, &old, m, n, m0, n0});
    const int i = threadIdx.x, mi = i / kCols, col = i % kCols;
    float v = 0.f;
    if (i < kRows * kCols) {
        const float s = warp_sum<1>(red, 0, mi, col);
        if (m0 + mi < m && n0 + col < n) {
            v = old + __bfloat162float(__float2bfloat16_rn(s));
            r[(size_t)(m0 + mi) * n + n0 + col] = v;
        }
    }
    float sq = v * v;
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    if (i < kRows * kCols && col == 0 && m0 + mi < m) {
        parts[(size_t)(m0 + mi) * gridDim.x + blockIdx.x] = sq;
    }
}

extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
kern_gemv_split3_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                      __nv_bfloat16* c0, __nv_bfloat16* c1, __nv_bfloat16* c2, int m,
                      int n0, int n1, int n2, int k) {
    __shared__ float red[kMaxWarps][1][kRows][kCols];
    check_launch(a, w, k);
    if ((n0 % kCols) != 0 || (n1 % kCols) != 0) __trap();
    const int n = n0 + n1 + n2;
    const int j0 = blockIdx.x * kCols, m0 = blockIdx.y * kRows;
    if (j0 >= n || m0 >= m) return;                // block-uniform
    const int base[1] = {j0}, lim[1] = {n};
    gemv_tiles<1>(a, w, m, k, base, lim, m0, red, NoNorm{});
    // the part this block's 16 columns lie in (block-uniform)
    __nv_bfloat16* c = j0 < n0 ? c0 : (j0 < n0 + n1 ? c1 : c2);
    const int start = j0 < n0 ? 0 : (j0 < n0 + n1 ? n0 : n0 + n1);
    const int width = j0 < n0 ? n0 : (j0 < n0 + n1 ? n1 : n2);
    for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) {
        const int mi = i / kCols, col = i % kCols;
        if (m0 + mi < m && j0 + col < n) {
            c[(size_t)(m0 + mi) * width + (j0 - start) + col] = __float2bfloat16_rn(warp_sum<1>(red, 0, mi, col));
        }
    }
}

// c[m, n] += a[m, k] . w[n, k]^T: each c element is read and written by the one thread that
// owns it, after the block's dot product is complete (in place is safe).
extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
kern_gemv_acc_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                   __nv_bfloat16* c, int m, int n, int k) {
    __shared__ float red[kMaxWarps][1][kRows][kCols];
    check_launch(a, w, k);
    const int n0 = blockIdx.x * kCols, m0 = blockIdx.y * kRows;
    if (n0 >= n || m0 >= m) return;                // block-uniform
    const int base[1] = {n0}, lim[1] = {n};
    gemv_tiles<1>(a, w, m, k, base, lim, m0, red, NoNorm{});
    for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) {
        const int mi = i / kCols, col = i % kCols;
        const float s = warp_sum<1>(red, 0, mi, col);
        if (m0 + mi < m && n0 + col < n) {
            __nv_bfloat16* o = c + (size_t)(m0 + mi) * n + n0 + col;
            *o = __float2bfloat16_rn(s + __bfloat162float(*o));
        }
    }
}
