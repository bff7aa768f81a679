// gt_mod.cu - kernels loaded by gt.cu through cuModuleLoadData (built twice:
// variant A and variant B with -DGT_VARIANT_B, so two modules hold a kernel of
// the same name with different code - the same-named-Triton-instance case).
extern "C" __global__ void mod_axpy(float *y, const float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x + blockIdx.y * gridDim.x * blockDim.x;
  if (i < n) {
#ifdef GT_VARIANT_B
    y[i] = a * x[i] - y[i];
#else
    y[i] = a * x[i] + y[i];
#endif
  }
}

// Mixed scalar sizes: offsets 0 (u8), 8 (i64), 16 (i32), 20 (f32), 24 (ptr).
extern "C" __global__ void mod_mixed(unsigned char u, long long l, int i, float f, float *out) {
  if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = (float)u + (float)l + (float)i + f;
}

extern "C" __global__ void mod_coop(int *counter, int n) {
  if (threadIdx.x == 0) atomicAdd(counter, n);
}

extern "C" __global__ void mod_cluster(float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (float)i;
}
