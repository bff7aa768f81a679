// kern own kernels: two-stage greedy argmax over bf16 logits.  See ABI.md for the contract.
//
// Stage 1 (kern_argmax_bf16_partial): grid (rows, P, 1), block (256, 1, 1).  Part p of row r
//   covers columns [p*chunk, min((p+1)*chunk, vocab)), chunk = ceil(ceil(vocab/P)/8)*8, and
//   writes its best (value as f32, column as i32) to part_val/part_idx[r*P + p].  P is gridDim.y.
// Stage 2 (kern_argmax_bf16_reduce): grid (rows, 1, 1), block (32, 1, 1), reduces the P partials
//   of a row and writes the column as i64.
// kern_argmax_markov_bf16_partial (ABI.md 2a): stage 1 of one logit row whose column c is first
//   given DSpark's Markov term, bf16(logits[c] + w1[prev] . w2[c]) (f32 dot and sum, one bf16
//   rounding: what the beta = 1 GEMM it replaces stores), read from the previous token id.
//
// Order ("better than"): NaN beats every number; among equal values (and among NaNs) the
// lowest column wins.  This is torch.argmax's result: the first NaN if the row has one, else
// the first occurrence of the maximum.  An empty part reports (-inf, INT32_MAX), which loses
// to every real column (a row of all -inf yields column 0).
#include <cuda_bf16.h>
#include <stdint.h>
#include <math_constants.h>

// Programmatic dependent launch (ABI.md, "PDL"): wait for the previous grid on the stream
// before the first memory access, and let the next grid start launching once this one has
// done its reads.  Both are no-ops in a plain launch.
#define KERN_GRID_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define KERN_LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")

namespace {

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    const bool vn = v != v, bn = bv != bv;
    if (vn || bn) {
        if (vn && bn) return i < bi;
        return vn;
    }
    return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void warp_best(float& v, int& i) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, off);
        const int oi = __shfl_xor_sync(0xffffffffu, i, off);
        if (better(ov, oi, v, i)) { v = ov; i = oi; }
    }
}

__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits16) {
    return __uint_as_float(bits16 << 16);
}

}  // namespace

// Stage 1's block reduction and the partial's store at part_val/part_idx[at].
__device__ __forceinline__ void store_part(float bv, int bi, float* part_val, int* part_idx,
                                           int64_t at) {
    __shared__ float sv[32];
    __shared__ int si[32];
    warp_best(bv, bi);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nwarps = (blockDim.x + 31) >> 5;
    if (lane == 0) { sv[warp] = bv; si[warp] = bi; }
    __syncthreads();
    if (warp == 0) {
        bv = lane < nwarps ? sv[lane] : -CUDART_INF_F;
        bi = lane < nwarps ? si[lane] : INT32_MAX;
        warp_best(bv, bi);
        if (lane == 0) { part_val[at] = bv; part_idx[at] = bi; }
    }
}

extern "C" __global__ void __launch_bounds__(256)
kern_argmax_bf16_partial(const __nv_bfloat16* __restrict__ logits,
                         float* __restrict__ part_val,
                         int* __restrict__ part_idx,
                         int vocab)
{
    const int row = blockIdx.x;
    const int p = blockIdx.y;
    KERN_GRID_WAIT();
    const int parts = gridDim.y;
    int chunk = (vocab + parts - 1) / parts;
    chunk = (chunk + 7) & ~7;
    const int begin = p * chunk;
    const int end = min(begin + chunk, vocab);
    const __nv_bfloat16* x = logits + (int64_t)row * vocab;

    float bv = -CUDART_INF_F;
    int bi = INT32_MAX;
    const bool vec = ((vocab & 7) == 0) && ((reinterpret_cast<uintptr_t>(logits) & 15) == 0);
    if (vec) {
        // begin is a multiple of 8, so is end unless end == vocab (then vocab % 8 == 0 too).
        const uint4* xv = reinterpret_cast<const uint4*>(x + begin);
        const int nvec = (end > begin) ? (end - begin) >> 3 : 0;
        for (int j = threadIdx.x; j < nvec; j += blockDim.x) {
            const uint4 w = __ldg(xv + j);
            const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
            const int c0 = begin + j * 8;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const float lo = bf16_bits_to_float(ws[k] & 0xffffu);
                const float hi = bf16_bits_to_float(ws[k] >> 16);
                if (better(lo, c0 + 2 * k, bv, bi)) { bv = lo; bi = c0 + 2 * k; }
                if (better(hi, c0 + 2 * k + 1, bv, bi)) { bv = hi; bi = c0 + 2 * k + 1; }
            }
        }
    } else {
        for (int c = begin + threadIdx.x; c < end; c += blockDim.x) {
            const float v = __bfloat162float(x[c]);
            if (better(v, c, bv, bi)) { bv = v; bi = c; }
        }
    }

    KERN_LAUNCH_DEPENDENTS();
    store_part(bv, bi, part_val, part_idx, (int64_t)row * parts + p);
}

#define MARKOV_RANK_MAX 256

// grid (1, P, 1), block (256, 1, 1); rank a multiple of 8, at most MARKOV_RANK_MAX, w1/w2
// 16-byte aligned [vocab, rank] bf16; prev_id one i64 (an id outside [0, vocab) adds no term).
extern "C" __global__ void __launch_bounds__(256)
kern_argmax_markov_bf16_partial(const int64_t* __restrict__ prev_id,
                                const __nv_bfloat16* __restrict__ w1,
                                const __nv_bfloat16* __restrict__ w2,
                                const __nv_bfloat16* __restrict__ logits,
                                float* __restrict__ part_val,
                                int* __restrict__ part_idx,
                                int vocab, int rank)
{
    __shared__ float row[MARKOV_RANK_MAX];
    const int p = blockIdx.y;
    KERN_GRID_WAIT();
    const int64_t prev = *prev_id;
    const bool valid = prev >= 0 && prev < vocab;
    for (int r = threadIdx.x; r < rank; r += blockDim.x)
        row[r] = valid ? __bfloat162float(w1[prev * rank + r]) : 0.0f;
    __syncthreads();
    const int parts = gridDim.y;
    int chunk = (vocab + parts - 1) / parts;
    chunk = (chunk + 7) & ~7;
    const int begin = p * chunk;
    const int end = min(begin + chunk, vocab);
    float bv = -CUDART_INF_F;
    int bi = INT32_MAX;
    for (int c = begin + threadIdx.x; c < end; c += blockDim.x) {
        const uint4* wc = reinterpret_cast<const uint4*>(w2 + (int64_t)c * rank);
        float acc = 0.0f;
        for (int j = 0; j < (rank >> 3); ++j) {
            const uint4 w = __ldg(wc + j);
            const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                acc = fmaf(row[8 * j + 2 * k], bf16_bits_to_float(ws[k] & 0xffffu), acc);
                acc = fmaf(row[8 * j + 2 * k + 1], bf16_bits_to_float(ws[k] >> 16), acc);
            }
        }
        const float v = __bfloat162float(__float2bfloat16(acc + __bfloat162float(logits[c])));
        if (better(v, c, bv, bi)) { bv = v; bi = c; }
    }
    KERN_LAUNCH_DEPENDENTS();
    store_part(bv, bi, part_val, part_idx, p);
}

extern "C" __global__ void __launch_bounds__(32)
kern_argmax_bf16_reduce(const float* __restrict__ part_val,
                        const int* __restrict__ part_idx,
                        int64_t* __restrict__ out,
                        int parts)
{
    const int row = blockIdx.x;
    KERN_GRID_WAIT();
    KERN_LAUNCH_DEPENDENTS();
    float bv = -CUDART_INF_F;
    int bi = INT32_MAX;
    // one warp; lanes beyond 32 (if a larger block is launched) are ignored
    if (threadIdx.x >= 32) return;
    for (int j = threadIdx.x; j < parts; j += 32) {
        const float v = part_val[(int64_t)row * parts + j];
        const int i = part_idx[(int64_t)row * parts + j];
        if (better(v, i, bv, bi)) { bv = v; bi = i; }
    }
    warp_best(bv, bi);
    if (threadIdx.x == 0) out[row] = (int64_t)bi;
}
