// kern own kernel: rotary angles, as HF's `inv_freq[:, None] @ positions[None, :]`.  See ABI.md.
//
//   out[i, t] = float(positions[t]) * inv_freq[i]      (one f32 rounding, no FMA)
//
// out is [half, tokens] (i-major, row stride = tokens): the layout of the bmm output the
// captured Inductor rope kernels read.  Grid (tokens, 1, 1), block (128, 1, 1).
#include <stdint.h>

// Programmatic dependent launch (ABI.md, "PDL"): wait for the previous grid on the stream
// before the first memory access, and let the next grid start launching once this one has
// done its reads.  Both are no-ops in a plain launch.
#define KERN_GRID_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define KERN_LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")

extern "C" __global__ void __launch_bounds__(128)
kern_rope_angles_f32(const int64_t* __restrict__ positions,
                     const float* __restrict__ inv_freq,
                     float* __restrict__ out,
                     int tokens,
                     int half)
{
    const int t = blockIdx.x;
    KERN_GRID_WAIT();
    KERN_LAUNCH_DEPENDENTS();
    const float p = (float)positions[t];
    for (int i = threadIdx.x; i < half; i += blockDim.x)
        out[(int64_t)i * tokens + t] = __fmul_rn(p, inv_freq[i]);
}
