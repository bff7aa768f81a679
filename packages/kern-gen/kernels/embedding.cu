// kern own kernel: embedding gather.  See ABI.md for the contract.
//
//   out[t, :] = table[ids[t], :]      (ids outside [0, vocab) give a zero row)
//
// Grid (tokens, 1, 1), block (256, 1, 1).  hidden must be a multiple of 8 and table/out
// 16-byte aligned: every thread moves 16-byte vectors.
#include <cuda_bf16.h>
#include <stdint.h>

// Programmatic dependent launch (ABI.md, "PDL"): wait for the previous grid on the stream
// before the first memory access, and let the next grid start launching once this one has
// done its reads.  Both are no-ops in a plain launch.
#define KERN_GRID_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define KERN_LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")

extern "C" __global__ void __launch_bounds__(256)
kern_embedding_bf16(const int64_t* __restrict__ ids,
                    const __nv_bfloat16* __restrict__ table,
                    __nv_bfloat16* __restrict__ out,
                    int hidden,
                    int vocab)
{
    const int t = blockIdx.x;
    KERN_GRID_WAIT();
    const int64_t id = ids[t];
    const int nvec = hidden >> 3;                     // 8 bf16 per 16-byte vector
    uint4* dst = reinterpret_cast<uint4*>(out + (int64_t)t * hidden);
    if (id < 0 || id >= (int64_t)vocab) {
        const uint4 z = make_uint4(0u, 0u, 0u, 0u);
        for (int i = threadIdx.x; i < nvec; i += blockDim.x) dst[i] = z;
        return;
    }
    const uint4* src = reinterpret_cast<const uint4*>(table + id * (int64_t)hidden);
    KERN_LAUNCH_DEPENDENTS();
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) dst[i] = __ldg(src + i);
}
