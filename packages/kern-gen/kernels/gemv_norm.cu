// kern own kernels: an RMSNorm carried by the few-row GEMVs around it (ABI.md 4e;
// `kern-gen --fuse-norm`, an option: measured no faster, docs/measurements.md issue 16,
// session 20; slower on the H200 in session 26, SmolLM2 0.528 vs 0.518 ms/token), over an
// f32 residual stream r [m, k] and its sums of squares by 16-column block, parts [m, p].  They share gemv.cu's main loop (gemv_core.cuh):
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
// PDL as gemv.cu: only weights (W's first batch, the norm weight g) before the wait.
#include "gemv_core.cuh"

namespace {

constexpr int kNormElems = 8192;  // A elements a norm-prologue block holds (16 KB of bf16)
constexpr int kNormMaxK = 4096;   // norm weight elements it stages in shared memory (8 KB)

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
// then kern_gemv_bf16 (Silu: kern_gemv_silu_bf16, w = [gate; up] rows).  kEarly: dependents
// launched right after the wait (kern_gemv_rnorm_et_bf16, gemv.cu kern_gemv_et_bf16's twin).
template <bool Silu, bool kEarly = false>
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
        gemv_tiles<1, RNormPrologue, kEarly>(xs, w, m, k, base, lim, m0, red, pro);
        store_plain(red, c, m, n, m0, n0);
    }
}

extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
kern_gemv_rnorm_bf16(const float* r, const float* parts, const __nv_bfloat16* __restrict__ g,
                     const __nv_bfloat16* __restrict__ w, __nv_bfloat16* c, int m, int n,
                     int k, int p, float eps) {
    gemv_rnorm<false>(r, parts, g, w, c, m, n, k, p, eps);
}

// kern_gemv_rnorm_bf16's contract and bits, its dependents launched right after its wait:
// kern-gen's choice right before a step that reads before its own wait (the decode attention
// under --fuse-norm; kern_gen/llama/pdl_order.py early_triggers).
extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
kern_gemv_rnorm_et_bf16(const float* r, const float* parts, const __nv_bfloat16* __restrict__ g,
                        const __nv_bfloat16* __restrict__ w, __nv_bfloat16* c, int m, int n,
                        int k, int p, float eps) {
    gemv_rnorm<false, true>(r, parts, g, w, c, m, n, k, p, eps);
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
