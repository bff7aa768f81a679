// Issue 16 lever (a probe, not wired into kern-gen): a decode MLP — the SiLU GEMV over the
// merged gate_up weight, then the down GEMV — as ONE persistent launch with a grid-wide
// barrier between its two phases, instead of two launches.
//
// Why: on the H100 (session 28's timeline) down's blocks see their grid-dependency wait
// return ~3.1 us after gate_up's last store, because they launch only when gate_up's last
// block ends its main loop; with the phases in one grid, every block requests its first down
// weight batch before the barrier, and the barrier (one atomic a block, one flag) replaces the
// launch and the grid-dependency resolution.  Whether that wins is what probe_mlp_fused.py
// measures: the MLP chain and the step's GEMMs against the two shipped kernels.  Evidence
// against it: session 29's early-triggering SiLU GEMV also started down sooner and lost (its
// first batches took bandwidth from gate_up's last tiles); the barrier's first down batch
// does the same, so the gain can only be the boundary's own cost.
//
// Contract, kern_mlp_fused_bf16(a, w_gu, w_d, h, c, bar, m, n_ff, d):
//   a bf16 [m, d], w_gu bf16 [2 n_ff, d] = [gate; up] rows, w_d bf16 [d, n_ff], h bf16
//   [m, n_ff] (written: silu(a.Wg^T) * (a.Wu^T), kern_gemv_silu_bf16's bits), c bf16 [m, d]
//   (written: h . Wd^T, kern_gemv_bf16's bits), for blocks of the same warp count.
//   bar: two u32, zero before the first launch; every launch leaves bar[0] zero again (bar[1]
//   counts launches).  m <= 8, d % 8 == 0, n_ff % 8 == 0; grid (G, 1, 1) with G no larger than
//   the blocks the GPU holds at once for this kernel (else the barrier never opens: the host
//   sizes G by the occupancy API), block (32 NW, 1, 1).
//
// Block b computes SiLU tiles b, b + G, ... (16 h columns each), then down tiles b, b + G, ...
// (16 c columns each).  A block with no down tile still arrives at the barrier.  The
// grid-dependency wait precedes every read of a (gemv_tiles); launch_dependents follows the
// first SiLU tile's main loop, when every block of the grid is resident, so a dependent's
// blocks can never hold the SMs that a block of this grid still needs to reach the barrier.
#include "gemv_core.cuh"      // build.py build_one copies the headers beside the source

namespace {

// Every block's stores before it happen before every block's loads after it (gpu scope):
// each block's thread 0 arrives with a relaxed atomic after a fence; the last arriver resets
// the count and releases the generation; the others acquire it.
__device__ __forceinline__ void grid_barrier(unsigned* bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned gen, now;
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(gen) : "l"(bar + 1) : "memory");
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            bar[0] = 0;
            asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(bar + 1), "r"(gen + 1)
                         : "memory");
        } else {
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(bar + 1)
                             : "memory");
            } while (now == gen);
        }
    }
    __syncthreads();
}

// The previous launch in the stream may still be in its barrier (PDL): a block touches bar only
// after its grid-dependency wait.  A block with a SiLU tile has waited already (a no-op here);
// one with none (G > n_ff / 16) has not.
__device__ __forceinline__ void wait_then_barrier(unsigned* bar) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    grid_barrier(bar);
}

// gemv_tiles' Norm hook: the barrier runs after the first down weight batch is requested and
// before h is read.
struct Barrier {
    static constexpr bool kShared = false;
    unsigned* bar;
    __device__ __forceinline__ void before_wait() const { wait_then_barrier(bar); }
    __device__ __forceinline__ void operator()() const {}
};

}  // namespace

extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
kern_mlp_fused_bf16(const __nv_bfloat16* a, const __nv_bfloat16* __restrict__ w_gu,
                    const __nv_bfloat16* __restrict__ w_d, __nv_bfloat16* h, __nv_bfloat16* c,
                    unsigned* bar, int m, int n_ff, int d) {
    __shared__ float red2[kMaxWarps][2][kRows][kCols];
    auto red1 = reinterpret_cast<float (*)[1][kRows][kCols]>(&red2[0][0][0][0]);
    check_launch(a, w_gu, d);
    check_launch(h, w_d, n_ff);
    if (m > kRows || gridDim.y != 1) __trap();
    const int tiles1 = (n_ff + kCols - 1) / kCols, tiles2 = (d + kCols - 1) / kCols;
    for (int t = blockIdx.x; t < tiles1; t += gridDim.x) {
        const int n0 = t * kCols;
        const int base[2] = {n0, n_ff + n0}, lim[2] = {n_ff, 2 * n_ff};
        gemv_tiles<2, NoNorm>(a, w_gu, m, d, base, lim, 0, red2, NoNorm{});
        store_silu(red2, h, m, n_ff, 0, n0);
        __syncthreads();                            // red2 is the next tile's
    }
    if ((int)blockIdx.x >= tiles2) {                // block-uniform: no down tile
        wait_then_barrier(bar);
        return;
    }
    for (int t = blockIdx.x; t < tiles2; t += gridDim.x) {
        const int n0 = t * kCols;
        const int base[1] = {n0}, lim[1] = {d};
        if (t == (int)blockIdx.x) {
            gemv_tiles<1, Barrier>(h, w_d, m, n_ff, base, lim, 0, red1, Barrier{bar});
        } else {
            gemv_tiles<1, NoNorm>(h, w_d, m, n_ff, base, lim, 0, red1, NoNorm{});
        }
        store_plain(red1, c, m, d, 0, n0);
        __syncthreads();
    }
}
