// kern own kernels: bf16 GEMV for few rows whose weight stream goes through bulk asynchronous
// copies (cp.async.bulk, the TMA's one-dimensional form) into a ring of shared-memory stages.
// An alternative implementation of the manifest GEMM kernel, like gemv.cu (ABI.md 4d), chosen
// with `kern-gen --gemm tma`.
//
// Why an own kernel, and why this one: gemv.cu's register loads (16 bytes a lane, 64 bytes a
// row a warp step over 16 rows 5 KB apart) reach ~3.5 TB/s on the Qwen3-4B shapes.  Here one
// producer lane per W row requests KC contiguous elements of its row at a time (2 KB, one
// request), STAGES deep, so a block keeps up to 64 KB (128 KB fused) of W in flight without
// spending registers or issue slots on it, and the producer lets the next kernel launch as
// soon as its last request is issued, so that kernel's weight stream starts while this one
// drains.  Measured on the H200 (.levers probe, docs/measurements.md, issue 16, session 15):
// a Qwen3-4B decode step's GEMMs under PDL in a graph 2441.5 us -> 2249.8 us (KC 1024, 2
// stages, 4 consumer warps: the best of the seven configurations tried).
//
// Contract (each entry point): the interface and results contract of its gemv.cu counterpart
// (kern_gemv_bf16, kern_gemv_silu_bf16, kern_gemv_split3_bf16: same parameters, same
// arithmetic per dot product but the order of its f32 partial sums), except the launch:
//   block (160, 1, 1): 4 consumer warps + 1 producer warp (another shape traps);
//   grid (G, ceil(m / 8), 1) with any G >= 1: block x takes the 16-column tiles x, x + G, ...
//   (persistent; G = min(tiles, resident blocks) is the fast choice: 3 a SM unfused, 1 fused);
//   dynamic shared memory kern_gemv_tma_smem(T) bytes: 67616 (T = 1: plain, split3), 135200
//   (T = 2: silu); k % 8 == 0, a and w 16-byte aligned (else trap).
// Nothing outside a[0 .. m*k), w[0 .. n*k) (w[0 .. 2n*k) fused) is read, nothing outside the
// outputs written.  Deterministic: the same bits on every launch with any G.
//
// Design.  Block (x, y) owns A rows m0 = 8y .. m0 + 7 and walks its tiles' k in chunks of
// KC: the producer lane of each W row (16 a tile, 32 for the fused [gate; up] pair) copies
// the row's chunk into stage i % STAGES after the consumers released it (mbarrier `empty`),
// the stage's `full` barrier counting the bytes.  Consumer warp w takes the 32-element steps
// w, w + 4, ... of each chunk: two mma.sync.m16n8k16 a step with gemv.cu's fragment layout (W
// rows from the stage, 16 bytes a lane; A from global memory after griddepcontrol.wait),
// accumulating in f32 over the chunks; after a tile's last chunk the four partials are summed
// in warp order through shared memory and the tile's epilogue stores it.
#include <cuda_bf16.h>
#include <stdint.h>

#ifndef KC            // the probe's knobs (-DKC= -DSTAGES= -DNWARPS=); the build uses these
#define KC 1024
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef NWARPS
#define NWARPS 4
#endif

namespace {

constexpr int kCols = 16, kRows = 8, kStep = 32;
constexpr int kRowBytes = KC * 2 + 64;       // a stage row, padded: rows g and g + 1 fall in
                                             // different bank halves (conflict-free 16-B lds)
constexpr int kPerWarp = KC / (kStep * NWARPS);
static_assert(KC % (kStep * NWARPS) == 0, "KC must be a multiple of 32 * NWARPS");

__device__ __forceinline__ uint32_t saddr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bar_init(uint64_t* b, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(saddr(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_expect(uint64_t* b, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(saddr(b)),
                 "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_arrive(uint64_t* b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(saddr(b)) : "memory");
}
__device__ __forceinline__ void bar_wait(uint64_t* b, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            " selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done) : "r"(saddr(b)), "r"(parity) : "memory");
    } while (!done);
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* b) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
        ::"r"(saddr(dst)), "l"(src), "r"(bytes), "r"(saddr(b)) : "memory");
}
__device__ __forceinline__ uint4 lds(const uint8_t* p, bool ok) {
    uint4 r = make_uint4(0, 0, 0, 0);
    if (ok) r = *reinterpret_cast<const uint4*>(p);
    return r;
}
// 16 bytes of A (written by the previous kernel: coherent, after griddepcontrol.wait)
__device__ __forceinline__ uint4 ld_a(const __nv_bfloat16* p, bool ok) {
    uint4 r;
    asm volatile(
        "{\n .reg .pred q;\n setp.ne.b32 q, %5, 0;\n"
        " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
        " @q ld.global.v4.u32 {%0,%1,%2,%3}, [%4];\n}\n"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "r"((int)ok) : "memory");
    return r;
}
__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int T>
struct Smem {
    static constexpr int kStage = T * kCols * kRowBytes;
    static constexpr int kBytes = STAGES * kStage + 2 * STAGES * 8;
};

// W rows of tile `tile` (T = 1: rows 16 tile .. ; T = 2: gate rows 16 tile .. and up rows
// n + 16 tile .., the merged [gate; up] weight): base and limit of each 16-row group.
template <int T>
__device__ __forceinline__ void tile_rows(int tile, int n, int (&base)[T], int (&lim)[T]) {
#pragma unroll
    for (int t = 0; t < T; ++t) {
        base[t] = t * n + tile * kCols;
        lim[t] = (t + 1) * n;
    }
}

__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(NWARPS * 32) : "memory");
}

// The persistent main loop: block x takes tiles x, x + gridDim.x, ... below `tiles`; the
// producer streams their (tile, chunk) pairs through the stage ring without draining between
// tiles.  After a tile's last chunk the consumers leave their partials in red[w][t][mi][col]
// (consumer warp w's dot product of A row m0 + mi with the tile's W row col of group t) and
// call epi(tile) between two consumer-only barriers.
template <int T, class Epi>
__device__ __forceinline__ void tma_loop(const __nv_bfloat16* a,
                                         const __nv_bfloat16* __restrict__ w, int m, int n,
                                         int k, int tiles, int m0,
                                         float (*red)[T][kRows][kCols], uint8_t* smem, Epi epi) {
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + STAGES * Smem<T>::kStage);
    uint64_t* empty = full + STAGES;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int chunks = (k + KC - 1) / KC;
    const int mine = (tiles - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;
    const int total = mine * chunks;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            bar_init(&full[s], 1);
            bar_init(&empty[s], NWARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (warp == NWARPS) {
        // producer: lane l < 16 T copies W row l % 16 of group l / 16 (if below its limit)
        const int t = lane / kCols, r = lane % kCols;
        int tile = blockIdx.x, c = 0, valid = 0, row = -1;
        for (int i = 0; i < total; ++i) {
            if (c == 0) {
                int base[T], lim[T];
                tile_rows<T>(tile, n, base, lim);
                valid = 0;
                row = -1;
#pragma unroll
                for (int tt = 0; tt < T; ++tt) {
                    valid += max(0, min(kCols, lim[tt] - base[tt]));
                    if (tt == t && base[tt] + r < lim[tt]) row = base[tt] + r;
                }
            }
            const int s = i % STAGES;
            if (i >= STAGES) bar_wait(&empty[s], ((i / STAGES) - 1) & 1);
            const int kc = min(KC, k - c * KC);
            if (lane == 0) bar_expect(&full[s], (uint32_t)(valid * kc * 2));
            __syncwarp();
            if (lane < T * kCols && row >= 0)
                bulk_copy(smem + s * Smem<T>::kStage + lane * kRowBytes,
                          w + (size_t)row * k + (size_t)c * KC, (uint32_t)(kc * 2), &full[s]);
            if (++c == chunks) {
                c = 0;
                tile += gridDim.x;
            }
        }
        // every W request of the block is issued: let the next kernel's blocks launch and
        // start their own weight stream while ours drains (its griddepcontrol.wait still
        // waits for this whole grid before it reads what we write)
        asm volatile("griddepcontrol.launch_dependents;");
    } else {
        const int g = lane >> 2, t4 = lane & 3;
        const bool a_ok = m0 + g < m;
        const __nv_bfloat16* ap = a + (size_t)(a_ok ? m0 + g : 0) * k;   // + the step's off
        float acc0[T][4], acc1[T][4];
#pragma unroll
        for (int t = 0; t < T; ++t)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc0[t][i] = acc1[t][i] = 0.f;
        asm volatile("griddepcontrol.wait;" ::: "memory");
        int tile = blockIdx.x, c = 0;
        bool lo_ok[T], hi_ok[T];
        for (int i = 0; i < total; ++i) {
            if (c == 0) {
                int base[T], lim[T];
                tile_rows<T>(tile, n, base, lim);
#pragma unroll
                for (int t = 0; t < T; ++t) {
                    lo_ok[t] = base[t] + g < lim[t];
                    hi_ok[t] = base[t] + g + 8 < lim[t];
                }
            }
            const int s = i % STAGES;
            const int kc = min(KC, k - c * KC);
            uint4 av[kPerWarp];
#pragma unroll
            for (int j = 0; j < kPerWarp; ++j) {
                const int off = (warp + j * NWARPS) * kStep + 8 * t4;
                av[j] = ld_a(ap + (size_t)c * KC + off, off < kc && a_ok);
            }
            bar_wait(&full[s], (i / STAGES) & 1);
            const uint8_t* st = smem + s * Smem<T>::kStage;
#pragma unroll
            for (int j = 0; j < kPerWarp; ++j) {
                const int off = (warp + j * NWARPS) * kStep + 8 * t4;
                const bool ok = off < kc;
#pragma unroll
                for (int t = 0; t < T; ++t) {
                    const uint4 wl = lds(st + (t * kCols + g) * kRowBytes + off * 2, ok && lo_ok[t]);
                    const uint4 wh = lds(st + (t * kCols + g + 8) * kRowBytes + off * 2, ok && hi_ok[t]);
                    mma(acc0[t], wl.x, wh.x, wl.y, wh.y, av[j].x, av[j].y);
                    mma(acc1[t], wl.z, wh.z, wl.w, wh.w, av[j].z, av[j].w);
                }
            }
            // Release stage s to the producer.  Our reads of it were generic-proxy ld.shared;
            // the producer's next cp.async.bulk into it writes through the async proxy, and
            // the mbarrier arrive/wait alone does not order the two proxies (PTX ISA, async
            // proxy: only the copy's completion carries an implicit fence, i.e. RAW, not this
            // WAR).  Without the fence the next chunk can land while a lane's ld.shared of this
            // one is still outstanding: a few wrong dot products, nondeterministically.
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            __syncwarp();
            if (lane == 0) bar_arrive(&empty[s]);
            if (++c == chunks) {
#pragma unroll
                for (int t = 0; t < T; ++t) {
                    red[warp][t][2 * t4][g] = acc0[t][0] + acc1[t][0];
                    red[warp][t][2 * t4 + 1][g] = acc0[t][1] + acc1[t][1];
                    red[warp][t][2 * t4][g + 8] = acc0[t][2] + acc1[t][2];
                    red[warp][t][2 * t4 + 1][g + 8] = acc0[t][3] + acc1[t][3];
#pragma unroll
                    for (int q = 0; q < 4; ++q) acc0[t][q] = acc1[t][q] = 0.f;
                }
                consumers_sync();
                if (tile + (int)gridDim.x >= tiles)     // this block's last tile
                    asm volatile("griddepcontrol.launch_dependents;");
                epi(tile);
                consumers_sync();
                c = 0;
                tile += gridDim.x;
            }
        }
    }
}

template <int T>
__device__ __forceinline__ float warp_sum(float (*red)[T][kRows][kCols], int t, int mi, int col) {
    float s = red[0][t][mi][col];
#pragma unroll
    for (int v = 1; v < NWARPS; ++v) s += red[v][t][mi][col];
    return s;
}

__device__ __forceinline__ void check_launch(const void* a, const void* w, int k) {
    if (blockDim.x != 32 * (NWARPS + 1) || blockDim.y != 1 || blockDim.z != 1 || (k & 7) != 0 ||
        ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(w)) & 15)) {
        __trap();
    }
}

}  // namespace

extern "C" __global__ void __launch_bounds__((NWARPS + 1) * 32)
kern_gemv_tma_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                   __nv_bfloat16* c, int m, int n, int k) {
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ float red[NWARPS][1][kRows][kCols];
    check_launch(a, w, k);
    const int m0 = blockIdx.y * kRows, tiles = (n + kCols - 1) / kCols;
    if ((int)blockIdx.x >= tiles || m0 >= m) return;
    tma_loop<1>(a, w, m, n, k, tiles, m0, red, smem, [&](int tile) {
        const int n0 = tile * kCols;
        for (int i = threadIdx.x; i < kRows * kCols; i += NWARPS * 32) {
            const int mi = i / kCols, col = i % kCols;
            if (m0 + mi < m && n0 + col < n)
                c[(size_t)(m0 + mi) * n + n0 + col] = __float2bfloat16_rn(warp_sum<1>(red, 0, mi, col));
        }
    });
}

extern "C" __global__ void __launch_bounds__((NWARPS + 1) * 32)
kern_gemv_tma_silu_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                        __nv_bfloat16* c, int m, int n, int k) {
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ float red[NWARPS][2][kRows][kCols];
    check_launch(a, w, k);
    const int m0 = blockIdx.y * kRows, tiles = (n + kCols - 1) / kCols;
    if ((int)blockIdx.x >= tiles || m0 >= m) return;
    tma_loop<2>(a, w, m, n, k, tiles, m0, red, smem, [&](int tile) {
        const int n0 = tile * kCols;
        for (int i = threadIdx.x; i < kRows * kCols; i += NWARPS * 32) {
            const int mi = i / kCols, col = i % kCols;
            if (m0 + mi < m && n0 + col < n) {
                const float gv = __bfloat162float(__float2bfloat16_rn(warp_sum<2>(red, 0, mi, col)));
                const float uv = __bfloat162float(__float2bfloat16_rn(warp_sum<2>(red, 1, mi, col)));
                c[(size_t)(m0 + mi) * n + n0 + col] =
                    __float2bfloat16_rn(gv / (1.0f + __expf(-gv)) * uv);
            }
        }
    });
}

extern "C" __global__ void __launch_bounds__((NWARPS + 1) * 32)
kern_gemv_tma_split3_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                          __nv_bfloat16* c0, __nv_bfloat16* c1, __nv_bfloat16* c2, int m,
                          int n0, int n1, int n2, int k) {
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ float red[NWARPS][1][kRows][kCols];
    check_launch(a, w, k);
    if ((n0 % kCols) != 0 || (n1 % kCols) != 0) __trap();
    const int n = n0 + n1 + n2;
    const int m0 = blockIdx.y * kRows, tiles = (n + kCols - 1) / kCols;
    if ((int)blockIdx.x >= tiles || m0 >= m) return;
    tma_loop<1>(a, w, m, n, k, tiles, m0, red, smem, [&](int tile) {
        // the part this tile's 16 columns lie in (n0, n1 are multiples of 16)
        const int j0 = tile * kCols;
        __nv_bfloat16* c = j0 < n0 ? c0 : (j0 < n0 + n1 ? c1 : c2);
        const int start = j0 < n0 ? 0 : (j0 < n0 + n1 ? n0 : n0 + n1);
        const int width = j0 < n0 ? n0 : (j0 < n0 + n1 ? n1 : n2);
        for (int i = threadIdx.x; i < kRows * kCols; i += NWARPS * 32) {
            const int mi = i / kCols, col = i % kCols;
            if (m0 + mi < m && j0 + col < n)
                c[(size_t)(m0 + mi) * width + (j0 - start) + col] =
                    __float2bfloat16_rn(warp_sum<1>(red, 0, mi, col));
        }
    });
}

// kern_gemv_tma_smem(out): out[0], out[1] = the dynamic shared memory of the T = 1 and T = 2
// entry points (a probe for tests; the generator pins the same numbers, ABI.md 4d).
extern "C" __global__ void kern_gemv_tma_smem(int* out) {
    if (threadIdx.x == 0) {
        out[0] = Smem<1>::kBytes;
        out[1] = Smem<2>::kBytes;
    }
}
