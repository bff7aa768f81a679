// Same name as dup_b.cu's function, different parameter layout: (ptr 8, i32 4).
extern "C" __global__ void dup(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 1.0f;
}
