// Test kernels for kern-runtime's GPU tests. Plain extern "C" entry points, flat ABI.
// Shapes: rows of 16 f32 per token; n = tokens * 16 elements.
#include <cstdint>

extern "C" __global__ void mul_w(const float* x, const float* w, float* tmp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) tmp[i] = x[i] * w[i % 16];
}

extern "C" __global__ void add_bias(const float* tmp, float* y, int n, float bias) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = tmp[i] + bias;
}

// Every literal type; u8 first and between wider slots to exercise natural alignment.
extern "C" __global__ void record(uint8_t a, int64_t b, float c, int64_t* out, uint32_t d,
                                  int32_t e, uint8_t g, int64_t h) {
    out[0] = a;
    out[1] = b;
    out[2] = (int64_t)__float_as_uint(c);
    out[3] = d;
    out[4] = e;
    out[5] = g;
    out[6] = h;
    out[7] = 0x5eed;
}

// A state region holds 8 f32 per token; col0 picks which half of a 16-wide row.
extern "C" __global__ void state_write(const float* x, float* st, int tokens, int col0) {
    int t = blockIdx.x, j = threadIdx.x;
    if (t < tokens && j < 8) st[t * 8 + j] = 2.0f * x[t * 16 + col0 + j];
}

extern "C" __global__ void state_read(const float* st, float* out, int tokens, int col0) {
    int t = blockIdx.x, j = threadIdx.x;
    if (t < tokens && j < 8) out[t * 16 + col0 + j] = st[t * 8 + j];
}

extern "C" __global__ void affine(const float* in, float* out, int n, float a, float b) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * in[i] + b;
}

// 64 KiB of dynamic shared memory (needs the opt-in attribute); one block.
extern "C" __global__ void smem_reverse(const float* x, float* y, int n) {
    extern __shared__ float s[];
    const int cap = 16384;  // 65536 bytes / 4
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[cap - 1 - i] = x[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = 3.0f * s[cap - 1 - i];
}

// Records which block wrote each element: checks that the grid expression was evaluated.
extern "C" __global__ void grid_id(int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = blockIdx.x;
}
