// kern own kernels: the few-row GEMV with its work split evenly over a persistent grid of
// thread-block clusters (kern-gen --gemm stream).  ABI.md 4h.
//
// Why beside gemv.cu: gemv.cu gives each block one 16-column tile, so a grid is as balanced
// as its tile count is a multiple of the SMs' block slots.  On the Qwen3-4B shape none is: o
// and down have 160 tiles on 132 SMs, gate_up 608 tiles in 2.3 waves of 264 slots, qkv 384
// tiles on 528 slots.  The SMs that run more tiles end 1.5-4 us after the others (H100,
// probe_gemv_timeline.py "busy SMs", session 28: o 1.54, gate_up 3.97, down 2.30, qkv 2.05
// us), about 10 us a layer in which the HBM stream runs below its rate.
//
// Contract, kern_gemv_stream_bf16(a, w, c, m, n, k): kern_gemv_bf16's (gemv.cu), but
//   block (32 * NW, 1, 1) with 1 <= NW <= 16, grid (P * C, ceil(m / 8), 1) for C >= 1
//   clusters of P = kSC blocks (compiled in), ceil(n / 16) >= P C, and the layout below must give
//   no warp units of more than two tiles (else trap; kern-gen's stream_fits says when).
//   Deterministic: the bits depend on (n, k, C, NW) only, not on the launch; they are not
//   gemv.cu's (another partition of the k sum).
// kern_gemv_stream_et_bf16: the same bits, dependents launched right after the wait (the
//   qkv GEMV before the decode attention, which reads before its own wait: gemv.cu's
//   kern_gemv_et_bf16).
// kern_gemv_stream_silu_bf16(a, w, c, m, n, k): kern_gemv_silu_bf16's contract (w = [gate;
//   up], 2n rows; c = silu(g) * u), the same layout over its n / 16 tile pairs.
//
// Layout.  A unit is one warp step of one tile: tile j (W rows 16 j .. 16 j + 15 of each
// part), step s (k elements 32 s .. 32 s + 31); S = ceil(k / 32) steps a tile.  Cluster c of
// C owns tiles [c T / C, (c + 1) T / C) (T = ceil(n / 16)), i.e. U = its tiles x S units;
// block rank r of the cluster owns units [r U / P, (r + 1) U / P) of them, and warp w of the
// block a contiguous 1 / NW of those.  A warp streams its units in batches of 4 (gemv.cu's
// loads, mma and first batch before the wait), so a batch may run over a tile boundary: the
// warp then stores its partial tile to a shared slot and starts the next.  The block sums
// each tile's slots in warp order.  A tile split between ranks r and r + 1 (a block's range
// ends inside it) is summed by rank r: its own part, then rank r + 1's, read through
// distributed shared memory after a cluster barrier.  kern-gen launches 66 clusters of 2 (one a
// TPC, all resident at once): a block of the Qwen3-4B shape streams at most 1.5 tiles of o
// and down (gemv.cu: 2 on 28 SMs), 3 of qkv and 5 of gate_up (gemv.cu's most a SM as well).
#include <cooperative_groups.h>

#include "gemv_core.cuh"

namespace cg = cooperative_groups;

// Blocks of a cluster: 2 in the build (a TPC: every one of the 66 TPCs of a 132-SM part holds
// one cluster).  4 is a lever's (-D KERN_STREAM_CLUSTER=4): 32 clusters of 4 split o / down
// ideally, but a GPC of 14 SMs holds only three, and session 29's first run (4 x 32, H100)
// was 60 % slower, as if a wave of clusters waited (probe_stream_clusters.py counts them).
#ifndef KERN_STREAM_CLUSTER
#define KERN_STREAM_CLUSTER 2
#endif

namespace {

constexpr int kSC = KERN_STREAM_CLUSTER;   // blocks of a cluster
constexpr int kSlots = 2;   // tiles a warp's units may touch

template <int T>
struct StreamSmem {
    float red[kMaxWarps][kSlots][T][kRows][kCols];   // warp partials by slot
    int tile[kMaxWarps][kSlots];                     // the slot's tile, -1 unused
    float edge[T][kRows][kCols];   // this block's first tile where it began in rank r - 1
};

// The block's units [a0, a1) (absolute: tile j, step s is unit j S + s).
struct Range {
    int a0, a1;
};

__device__ __forceinline__ Range block_range(int tiles, int steps) {
    const int clusters = gridDim.x / kSC, c = blockIdx.x / kSC, r = blockIdx.x % kSC;
    const long long t_lo = (long long)c * tiles / clusters;
    const long long t_hi = (long long)(c + 1) * tiles / clusters;
    const long long units = (t_hi - t_lo) * steps;
    return {(int)(t_lo * steps + units * r / kSC), (int)(t_lo * steps + units * (r + 1) / kSC)};
}

// Launch shape and size checks (trap): kernel geometry, the cluster's tile count, int units.
__device__ __forceinline__ void check_stream(const void* a, const void* w, int n, int k) {
    check_launch(a, w, k);
    const int tiles = (n + kCols - 1) / kCols, steps = (k + kStep - 1) / kStep;
    if ((gridDim.x % kSC) != 0 || tiles < (int)gridDim.x ||
        (long long)tiles * steps >= (1ll << 31)) {
        __trap();
    }
}

// One batch of kUnroll units from unit u (advanced; (j, s) its tile and step) of the warp's
// range ending at w1: W of each part t (rows t n + 16 j + g and + 8), the units' tiles in jt
// (-1 past the range) and k offsets in off (-1 where nothing is loaded).
template <int T, bool kFirst>
__device__ __forceinline__ void issue_w(const __nv_bfloat16* __restrict__ w, int n, int k,
                                        int steps, int g, int t4, int w1, int& u, int& j,
                                        int& s, uint4 (&wl)[T][kUnroll], uint4 (&wh)[T][kUnroll],
                                        int (&jt)[kUnroll], int (&off)[kUnroll]) {
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) {
        const bool in = u < w1;
        const int o = s * kStep + 8 * t4;
        const bool ok = in && o < k;
        jt[i] = in ? j : -1;
        off[i] = ok ? o : -1;
        const int row = kCols * j + g;
#pragma unroll
        for (int t = 0; t < T; ++t) {
            const bool lo = ok && row < n, hi = ok && row + 8 < n;
            const __nv_bfloat16* pl = lo ? w + (size_t)(t * n + row) * k + o : w;
            const __nv_bfloat16* ph = hi ? w + (size_t)(t * n + row + 8) * k + o : w;
            wl[t][i] = kFirst ? ld_w_first(pl, lo) : ld_w(pl, lo);
            wh[t][i] = kFirst ? ld_w_first(ph, hi) : ld_w(ph, hi);
        }
        if (in && ++s == steps) {
            s = 0;
            ++j;
        }
        u += in ? 1 : 0;
    }
}

__device__ __forceinline__ void issue_a(const __nv_bfloat16* ap, bool a_ok,
                                        const int (&off)[kUnroll], uint4 (&av)[kUnroll]) {
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) {
        const bool ok = a_ok && off[i] >= 0;
        av[i] = ld_a(ok ? ap + off[i] : ap, ok);
    }
}

// The warp's partial of tile `tile` (its accumulators) into slot `slot`, accumulators zeroed.
template <int T>
__device__ __forceinline__ void flush(StreamSmem<T>& sm, int warp, int slot, int tile, int g,
                                      int t4, float (&acc0)[T][4], float (&acc1)[T][4]) {
#pragma unroll
    for (int t = 0; t < T; ++t) {
        sm.red[warp][slot][t][2 * t4][g] = acc0[t][0] + acc1[t][0];
        sm.red[warp][slot][t][2 * t4 + 1][g] = acc0[t][1] + acc1[t][1];
        sm.red[warp][slot][t][2 * t4][g + 8] = acc0[t][2] + acc1[t][2];
        sm.red[warp][slot][t][2 * t4 + 1][g + 8] = acc0[t][3] + acc1[t][3];
#pragma unroll
        for (int i = 0; i < 4; ++i) acc0[t][i] = acc1[t][i] = 0.f;
    }
    if ((threadIdx.x & 31) == 0) sm.tile[warp][slot] = tile;
}

// The main loop: every warp streams its units, leaving its partial tiles in sm (after a
// __syncthreads on return).
template <int T, bool kEarly>
__device__ __forceinline__ void stream_units(const __nv_bfloat16* a,
                                             const __nv_bfloat16* __restrict__ w, int m, int n,
                                             int k, int m0, Range br, StreamSmem<T>& sm) {
    const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const int steps = (k + kStep - 1) / kStep;
    const long long len = br.a1 - br.a0;
    const int w0 = br.a0 + (int)(len * warp / nw), w1 = br.a0 + (int)(len * (warp + 1) / nw);
    if (w1 > w0 && (w1 - 1) / steps - w0 / steps + 1 > kSlots) __trap();
    if (lane == 0) sm.tile[warp][0] = sm.tile[warp][1] = -1;
    const bool a_ok = m0 + g < m;
    const __nv_bfloat16* ap = a + (size_t)(a_ok ? m0 + g : 0) * k;

    uint4 wl[T][kUnroll], wh[T][kUnroll], av[kUnroll];
    int jt[kUnroll], off[kUnroll];
    float acc0[T][4], acc1[T][4];
#pragma unroll
    for (int t = 0; t < T; ++t) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc0[t][i] = acc1[t][i] = 0.f;
    }
    int u = w0, j = w0 / steps, s = w0 - j * steps;
    int cur = j, slot = 0;
    issue_w<T, true>(w, n, k, steps, g, t4, w1, u, j, s, wl, wh, jt, off);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if constexpr (kEarly) asm volatile("griddepcontrol.launch_dependents;");
    issue_a(ap, a_ok, off, av);
    for (;;) {
#pragma unroll
        for (int i = 0; i < kUnroll; ++i) {
            if (jt[i] < 0) continue;                 // warp-uniform: past the warp's range
            if (jt[i] != cur) {
                flush<T>(sm, warp, slot++, cur, g, t4, acc0, acc1);
                cur = jt[i];
            }
#pragma unroll
            for (int t = 0; t < T; ++t) {
                mma(acc0[t], wl[t][i].x, wh[t][i].x, wl[t][i].y, wh[t][i].y, av[i].x, av[i].y);
                mma(acc1[t], wl[t][i].z, wh[t][i].z, wl[t][i].w, wh[t][i].w, av[i].z, av[i].w);
            }
        }
        if (u >= w1) break;
        issue_w<T, false>(w, n, k, steps, g, t4, w1, u, j, s, wl, wh, jt, off);
        issue_a(ap, a_ok, off, av);
    }
    if (w1 > w0) flush<T>(sm, warp, slot, cur, g, t4, acc0, acc1);
    if constexpr (!kEarly) asm volatile("griddepcontrol.launch_dependents;");
    __syncthreads();
}

// The block's f32 sum of tile j, part t, element (mi, col): its warps' slots in warp order.
template <int T>
__device__ __forceinline__ float tile_sum(const StreamSmem<T>& sm, int j, int t, int mi,
                                          int col) {
    const int nw = blockDim.x >> 5;
    float v = 0.f;
    for (int q = 0; q < nw; ++q) {
#pragma unroll
        for (int sl = 0; sl < kSlots; ++sl) {
            if (sm.tile[q][sl] == j) v += sm.red[q][sl][t][mi][col];
        }
    }
    return v;
}

// Stores tile j from sum(t, mi, col): plain (T = 1) or SiLU(gate) * up (T = 2).
template <int T, class Sum>
__device__ __forceinline__ void store_tile(const Sum& sum, __nv_bfloat16* c, int m, int n,
                                           int m0, int j) {
    if constexpr (T == 1) {
        store_plain_by(sum, c, m, n, m0, kCols * j);
    } else {
        store_silu_by(sum, c, m, n, m0, kCols * j);
    }
}

template <int T, bool kEarly>
__device__ __forceinline__ void gemv_stream(const __nv_bfloat16* a,
                                            const __nv_bfloat16* __restrict__ w,
                                            __nv_bfloat16* c, int m, int n, int k) {
    __shared__ StreamSmem<T> sm;
    check_stream(a, w, n, k);
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const int tiles = (n + kCols - 1) / kCols, steps = (k + kStep - 1) / kStep;
    const int m0 = blockIdx.y * kRows;
    const Range br = block_range(tiles, steps);
    // a tile spans at most two blocks (each range has >= 1 tile of units: tiles >= 4 C)
    const int jf = br.a0 / steps, jl = (br.a1 - 1) / steps;
    const bool head = jf * steps < br.a0;          // jf began in rank - 1
    const bool tail = (jl + 1) * steps > br.a1;    // jl ends in rank + 1
    if ((head && tail && jf == jl) || (tail && rank + 1 >= kSC)) __trap();
    if (m0 < m) stream_units<T, kEarly>(a, w, m, n, k, m0, br, sm);   // grid-uniform
    if (m0 < m && head) {
        for (int i = threadIdx.x; i < T * kRows * kCols; i += blockDim.x) {
            const int t = i / (kRows * kCols), mi = (i / kCols) % kRows, col = i % kCols;
            sm.edge[t][mi][col] = tile_sum(sm, jf, t, mi, col);
        }
    }
    if (m0 < m) {
        for (int j = head ? jf + 1 : jf; j <= (tail ? jl - 1 : jl); ++j) {
            store_tile<T>([&](int t, int mi, int col) { return tile_sum(sm, j, t, mi, col); },
                          c, m, n, m0, j);
        }
    }
    cluster.sync();                                // rank + 1's edge is written
    if (m0 < m && tail) {
        const float* next = cluster.map_shared_rank(&sm.edge[0][0][0], rank + 1);
        store_tile<T>([&](int t, int mi, int col) {
            return tile_sum(sm, jl, t, mi, col) + next[(t * kRows + mi) * kCols + col];
        }, c, m, n, m0, jl);
    }
    cluster.sync();                                // rank - 1 has read this block's edge
}

}  // namespace

extern "C" __global__ void __cluster_dims__(kSC, 1, 1) __launch_bounds__(kMaxWarps * 32, 1)
kern_gemv_stream_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                      __nv_bfloat16* c, int m, int n, int k) {
    gemv_stream<1, false>(a, w, c, m, n, k);
}

extern "C" __global__ void __cluster_dims__(kSC, 1, 1) __launch_bounds__(kMaxWarps * 32, 1)
kern_gemv_stream_et_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                         __nv_bfloat16* c, int m, int n, int k) {
    gemv_stream<1, true>(a, w, c, m, n, k);
}

extern "C" __global__ void __cluster_dims__(kSC, 1, 1) __launch_bounds__(kMaxWarps * 32, 1)
kern_gemv_stream_silu_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w,
                           __nv_bfloat16* c, int m, int n, int k) {
    gemv_stream<2, false>(a, w, c, m, n, k);
}
