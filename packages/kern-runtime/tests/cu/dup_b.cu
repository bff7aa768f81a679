// Same name as dup_a.cu's function, different parameter layout: (ptr 8, i64 8, f32 4).
extern "C" __global__ void dup(float* y, long long n, float v) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = v;
}
