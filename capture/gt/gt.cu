// gt.cu - ground truth for the capture library.
//
// Launches kernels of known ABI through every launch path the library
// handles and writes, for each launch, what the capture must contain:
// name, API, module (by cubin file), grid/block/shared memory, launch
// attributes, graph-capture flag and exact parameter bytes (with the pointer
// words and their allocation ranges).  gt_check.py compares it with the
// capture.  Parameter offsets are the C ABI layout written out by hand below;
// the program cross-checks them against cuFuncGetParamInfo and aborts if they
// disagree (that would be a bug in this test, not in the capture).
//
// usage: gt <modA.cubin> <modB.cubin> <expected.json>
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>

#define CK(x)                                                                           \
  do {                                                                                  \
    CUresult r_ = (x);                                                                  \
    if (r_ != CUDA_SUCCESS) {                                                           \
      const char *s_ = "?";                                                             \
      cuGetErrorString(r_, &s_);                                                        \
      fprintf(stderr, "%s:%d %s -> %d %s\n", __FILE__, __LINE__, #x, (int)r_, s_);      \
      exit(2);                                                                          \
    }                                                                                   \
  } while (0)
#define RK(x)                                                                           \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "%s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(2);                                                                          \
    }                                                                                   \
  } while (0)

struct S {  // by-value struct: size 24, align 8
  int a;
  float b;
  long long c;
  char d[5];
};
struct P {  // struct with pointers inside: data@0, n@8, out@16; size 24
  float *data;
  int n;
  float *out;
};

extern "C" __global__ void k_ptrs(float *a, const float *b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] += b[i];
}
// u8@0 i64@8 i32@16 f32@20 f64@24 ptr@32
extern "C" __global__ void k_scalars(unsigned char u, long long l, int i, float f, double d, float *out) {
  extern __shared__ float sm[];
  sm[threadIdx.x] = (float)u + (float)l + (float)i + f + (float)d;
  __syncthreads();
  if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = sm[0];
}
// S@0 (24 bytes) i32@24 ptr@32
extern "C" __global__ void k_struct(S s, int tail, float *out) {
  if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = s.a + s.b + (float)s.c + s.d[4] + tail;
}
extern "C" __global__ void k_structptr(P p) {
  int i = threadIdx.x;
  if (i < p.n) p.out[i] = p.data[i];
}
template <int N>
__global__ void k_tmpl(float *out) {  // C++-mangled name
  if (threadIdx.x == 0) out[0] = (float)N;
}
extern "C" __global__ void k_coop(int *counter) {
  if (threadIdx.x == 0) atomicAdd(counter, 1);
}

// ---------------------------------------------------------------- expectations
struct Param {
  size_t off;
  std::vector<unsigned char> bytes;
};
struct Ptr {  // a pointer word expected inside param `param` at byte `at`
  int param;
  size_t at;
  unsigned long long value, range_start, range_size;
};

static FILE *g_out;
static int g_count;

static std::string hex(const void *p, size_t n) {
  static const char d[] = "0123456789abcdef";
  std::string s;
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++) {
    s += d[b[i] >> 4];
    s += d[b[i] & 15];
  }
  return s;
}

template <class T>
static Param prm(size_t off, const T &v) {
  Param p;
  p.off = off;
  p.bytes.assign((const unsigned char *)&v, (const unsigned char *)&v + sizeof(T));
  return p;
}

static Ptr ptr_at(int param, size_t at, const void *v) {
  CUdeviceptr base = 0;
  size_t size = 0;
  CK(cuMemGetAddressRange(&base, &size, (CUdeviceptr)v));
  return Ptr{param, at, (unsigned long long)(uintptr_t)v, (unsigned long long)base, (unsigned long long)size};
}

static void check_layout(CUfunction f, const char *tag, const std::vector<Param> &ps) {
  for (size_t i = 0; i <= ps.size(); i++) {
    size_t off = 0, sz = 0;
    CUresult r = cuFuncGetParamInfo(f, i, &off, &sz);
    if (i == ps.size()) {
      if (r != CUDA_ERROR_INVALID_VALUE) {
        fprintf(stderr, "%s: more params than expected\n", tag);
        exit(3);
      }
      break;
    }
    if (r != CUDA_SUCCESS || off != ps[i].off || sz != ps[i].bytes.size()) {
      fprintf(stderr, "%s: param %zu layout %zu/%zu, test expects %zu/%zu (r=%d)\n", tag, i, off, sz,
              ps[i].off, ps[i].bytes.size(), (int)r);
      exit(3);
    }
  }
}

// Writes one expected launch record (one JSON object per line).
static void expect(const char *tag, CUfunction f, const char *api, const char *module, dim3 g, dim3 b,
                   unsigned smem, const std::vector<Param> &ps, const std::vector<Ptr> &ptrs, bool capturing,
                   const char *attrs_json = "[]") {
  const char *name = NULL;
  CK(cuFuncGetName(&name, f));
  check_layout(f, tag, ps);
  int regs = 0;
  CK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
  fprintf(g_out, "{\"tag\":\"%s\",\"order\":%d,\"name\":\"%s\",\"api\":%s%s%s,\"module\":\"%s\",", tag,
          g_count++, name, api ? "\"" : "", api ? api : "null", api ? "\"" : "", module);
  fprintf(g_out, "\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"smem\":%u,\"capturing\":%s,\"regs\":%d,", g.x, g.y,
          g.z, b.x, b.y, b.z, smem, capturing ? "true" : "false", regs);
  fprintf(g_out, "\"attrs\":%s,\"params\":[", attrs_json);
  for (size_t i = 0; i < ps.size(); i++)
    fprintf(g_out, "%s{\"offset\":%zu,\"size\":%zu,\"bytes\":\"%s\"}", i ? "," : "", ps[i].off,
            ps[i].bytes.size(), hex(ps[i].bytes.data(), ps[i].bytes.size()).c_str());
  fprintf(g_out, "],\"ptrs\":[");
  for (size_t i = 0; i < ptrs.size(); i++)
    fprintf(g_out, "%s{\"param\":%d,\"at\":%zu,\"value\":%llu,\"range_start\":%llu,\"range_size\":%llu}",
            i ? "," : "", ptrs[i].param, ptrs[i].at, ptrs[i].value, ptrs[i].range_start, ptrs[i].range_size);
  fprintf(g_out, "]}\n");
  fflush(g_out);
}

static std::vector<char> read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(2);
  }
  std::vector<char> v;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) v.insert(v.end(), buf, buf + n);
  fclose(f);
  return v;
}

static CUfunction rt_func(const void *sym) {
  cudaFunction_t f;
  RK(cudaGetFuncBySymbol(&f, sym));
  return (CUfunction)f;
}

// Packs params at their offsets into one buffer (the `extra` form).
static std::vector<unsigned char> pack(const std::vector<Param> &ps, size_t total) {
  std::vector<unsigned char> buf(total, 0);
  for (auto &p : ps) memcpy(buf.data() + p.off, p.bytes.data(), p.bytes.size());
  return buf;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: gt modA.cubin modB.cubin expected.jsonl\n");
    return 1;
  }
  RK(cudaSetDevice(0));
  RK(cudaFree(0));  // creates the primary context (and runs cuInit -> injection)
  g_out = fopen(argv[3], "w");
  if (!g_out) return 1;

  std::vector<char> imgA = read_file(argv[1]), imgB = read_file(argv[2]);
  CUmodule modA, modB;
  CK(cuModuleLoadData(&modA, imgA.data()));
  CK(cuModuleLoadData(&modB, imgB.data()));
  CUfunction axpyA, axpyB, mixed, coop, cluster;
  CK(cuModuleGetFunction(&axpyA, modA, "mod_axpy"));
  CK(cuModuleGetFunction(&axpyB, modB, "mod_axpy"));
  CK(cuModuleGetFunction(&mixed, modA, "mod_mixed"));
  CK(cuModuleGetFunction(&coop, modA, "mod_coop"));
  CK(cuModuleGetFunction(&cluster, modA, "mod_cluster"));

  const int N = 4096;
  float *a, *b, *out;
  int *counter;
  RK(cudaMalloc(&a, N * sizeof(float)));
  RK(cudaMalloc(&b, N * sizeof(float)));
  RK(cudaMalloc(&out, N * sizeof(float)));
  RK(cudaMalloc(&counter, 256));
  RK(cudaMemset(a, 0, N * sizeof(float)));
  RK(cudaMemset(b, 0, N * sizeof(float)));
  RK(cudaMemset(counter, 0, 256));
  float *a_off = a + 64;  // interior pointer: offset 256 into its allocation
  cudaStream_t s;
  RK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // 1. <<<>>> with pointers and an i32 (runtime -> library kernel).
  {
    int n = 1000;
    k_ptrs<<<dim3(4), dim3(256), 0, s>>>(a_off, b, n);
    RK(cudaGetLastError());
    expect("rt_ptrs", rt_func((const void *)k_ptrs), NULL, "rt", dim3(4), dim3(256), 0,
           {prm(0, a_off), prm(8, b), prm(16, n)}, {ptr_at(0, 0, a_off), ptr_at(1, 0, b)}, false);
  }
  // 2. <<<>>> with u8/i64/i32/f32/f64 and dynamic shared memory.
  {
    unsigned char u = 0xab;
    long long l = -1234567890123LL;
    int i = -7;
    float f = 3.25f;
    double d = -0.5;
    k_scalars<<<dim3(1), dim3(32), 32 * sizeof(float), s>>>(u, l, i, f, d, out);
    RK(cudaGetLastError());
    expect("rt_scalars", rt_func((const void *)k_scalars), NULL, "rt", dim3(1), dim3(32), 128,
           {prm(0, u), prm(8, l), prm(16, i), prm(20, f), prm(24, d), prm(32, out)}, {ptr_at(5, 0, out)}, false);
  }
  // 3. <<<>>> with a by-value struct.
  {
    S sv;
    memset(&sv, 0, sizeof sv);
    sv.a = 0x01020304;
    sv.b = 1.5f;
    sv.c = 0x1122334455667788LL;
    memcpy(sv.d, "kern", 5);
    int tail = 99;
    k_struct<<<dim3(2), dim3(64), 0, s>>>(sv, tail, out);
    RK(cudaGetLastError());
    expect("rt_struct", rt_func((const void *)k_struct), NULL, "rt", dim3(2), dim3(64), 0,
           {prm(0, sv), prm(24, tail), prm(32, out)}, {ptr_at(2, 0, out)}, false);
  }
  // 4. <<<>>> with pointers inside a by-value struct.
  {
    P pv;
    memset(&pv, 0, sizeof pv);
    pv.data = b;
    pv.n = 32;
    pv.out = a_off;
    k_structptr<<<dim3(1), dim3(32), 0, s>>>(pv);
    RK(cudaGetLastError());
    expect("rt_structptr", rt_func((const void *)k_structptr), NULL, "rt", dim3(1), dim3(32), 0, {prm(0, pv)},
           {ptr_at(0, 0, b), ptr_at(0, 16, a_off)}, false);
  }
  // 5. <<<>>> of a template instance (mangled name).
  {
    k_tmpl<7><<<dim3(1), dim3(1), 0, s>>>(out);
    RK(cudaGetLastError());
    expect("rt_template", rt_func((const void *)k_tmpl<7>), NULL, "rt", dim3(1), dim3(1), 0, {prm(0, out)},
           {ptr_at(0, 0, out)}, false);
  }
  // 6/7. cuLaunchKernel on two module-loaded functions of the same name.
  {
    float alpha = 2.0f;
    int n = N;
    void *args[] = {&a, &b, &alpha, &n};
    CK(cuLaunchKernel(axpyA, 4, 2, 1, 128, 1, 1, 0, (CUstream)s, args, NULL));
    expect("drv_axpy_A", axpyA, "cuLaunchKernel", "A", dim3(4, 2), dim3(128), 0,
           {prm(0, a), prm(8, b), prm(16, alpha), prm(20, n)}, {ptr_at(0, 0, a), ptr_at(1, 0, b)}, false);
    CK(cuLaunchKernel(axpyB, 8, 1, 1, 64, 1, 1, 0, (CUstream)s, args, NULL));
    expect("drv_axpy_B", axpyB, "cuLaunchKernel", "B", dim3(8), dim3(64), 0,
           {prm(0, a), prm(8, b), prm(16, alpha), prm(20, n)}, {ptr_at(0, 0, a), ptr_at(1, 0, b)}, false);
  }
  // 8. cuLaunchKernel with the packed `extra` form.
  {
    unsigned char u = 7;
    long long l = 0x0102030405060708LL;
    int i = 42;
    float f = -1.0f;
    std::vector<Param> ps = {prm(0, u), prm(8, l), prm(16, i), prm(20, f), prm(24, out)};
    std::vector<unsigned char> buf = pack(ps, 32);
    size_t size = buf.size();
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    CK(cuLaunchKernel(mixed, 1, 1, 1, 32, 1, 1, 0, (CUstream)s, NULL, extra));
    expect("drv_extra", mixed, "cuLaunchKernel", "A", dim3(1), dim3(32), 0, ps, {ptr_at(4, 0, out)}, false);
  }
  // 9. cuLaunchKernelEx with attributes (cluster 2x1x1, priority).
  {
    int n = N;
    void *args[] = {&out, &n};
    CUlaunchAttribute at[2];
    memset(at, 0, sizeof at);
    at[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    at[0].value.clusterDim.x = 2;
    at[0].value.clusterDim.y = 1;
    at[0].value.clusterDim.z = 1;
    at[1].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    at[1].value.priority = 0;
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = 8, cfg.gridDimY = 1, cfg.gridDimZ = 1;
    cfg.blockDimX = 128, cfg.blockDimY = 1, cfg.blockDimZ = 1;
    cfg.sharedMemBytes = 0;
    cfg.hStream = (CUstream)s;
    cfg.attrs = at;
    cfg.numAttrs = 2;
    CK(cuLaunchKernelEx(&cfg, cluster, args, NULL));
    expect("drv_ex_attrs", cluster, "cuLaunchKernelEx", "A", dim3(8), dim3(128), 0, {prm(0, out), prm(8, n)},
           {ptr_at(0, 0, out)}, false,
           "[{\"id\":4,\"value\":[2,1,1]},{\"id\":8,\"value\":0}]");
  }
  // 10. cuLaunchKernelEx with `extra` (the nvjet form).
  {
    unsigned char u = 200;
    long long l = -1;
    int i = 1 << 20;
    float f = 0.125f;
    std::vector<Param> ps = {prm(0, u), prm(8, l), prm(16, i), prm(20, f), prm(24, out)};
    std::vector<unsigned char> buf = pack(ps, 32);
    size_t size = buf.size();
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = 2, cfg.gridDimY = 3, cfg.gridDimZ = 1;
    cfg.blockDimX = 32, cfg.blockDimY = 2, cfg.blockDimZ = 1;
    cfg.sharedMemBytes = 256;
    cfg.hStream = (CUstream)s;
    CK(cuLaunchKernelEx(&cfg, mixed, NULL, extra));
    expect("drv_ex_extra", mixed, "cuLaunchKernelEx", "A", dim3(2, 3), dim3(32, 2), 256, ps, {ptr_at(4, 0, out)},
           false);
  }
  // 11. cuLaunchCooperativeKernel.
  {
    int n = 3;
    void *args[] = {&counter, &n};
    CK(cuLaunchCooperativeKernel(coop, 2, 1, 1, 64, 1, 1, 0, (CUstream)s, args));
    expect("drv_coop", coop, "cuLaunchCooperativeKernel", "A", dim3(2), dim3(64), 0, {prm(0, counter), prm(8, n)},
           {ptr_at(0, 0, counter)}, false);
  }
  // 12. cudaLaunchCooperativeKernel (runtime chooses the driver API).
  {
    void *args[] = {&counter};
    RK(cudaLaunchCooperativeKernel((const void *)k_coop, dim3(2), dim3(32), args, 0, s));
    expect("rt_coop", rt_func((const void *)k_coop), NULL, "rt", dim3(2), dim3(32), 0, {prm(0, counter)},
           {ptr_at(0, 0, counter)}, false);
  }
  // 13. cuLaunchKernel_ptsz on the per-thread default stream.
  {
    typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void **, void **);
    launch_fn ptsz = (launch_fn)dlsym(RTLD_DEFAULT, "cuLaunchKernel_ptsz");
    if (ptsz) {
      float alpha = 0.5f;
      int n = 512;
      void *args[] = {&a, &b, &alpha, &n};
      CK(ptsz(axpyA, 2, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
      expect("drv_ptsz", axpyA, "cuLaunchKernel_ptsz", "A", dim3(2), dim3(256), 0,
             {prm(0, a), prm(8, b), prm(16, alpha), prm(20, n)}, {ptr_at(0, 0, a), ptr_at(1, 0, b)}, false);
    } else {
      fprintf(stderr, "cuLaunchKernel_ptsz not found; skipped\n");
    }
  }
  RK(cudaDeviceSynchronize());
  // 14/15. Launches inside stream capture (recorded with capturing=true; the
  // graph replay afterwards must produce no records).
  {
    cudaStream_t cs;
    RK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    cudaGraph_t graph;
    int n = 77;
    RK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    k_ptrs<<<dim3(1), dim3(128), 0, cs>>>(a, b, n);
    float alpha = 1.0f;
    int n2 = 128;
    void *args[] = {&a, &b, &alpha, &n2};
    CUresult lr = cuLaunchKernel(axpyB, 1, 1, 1, 128, 1, 1, 0, (CUstream)cs, args, NULL);
    RK(cudaStreamEndCapture(cs, &graph));
    CK(lr);
    expect("rt_in_capture", rt_func((const void *)k_ptrs), NULL, "rt", dim3(1), dim3(128), 0,
           {prm(0, a), prm(8, b), prm(16, n)}, {ptr_at(0, 0, a), ptr_at(1, 0, b)}, true);
    expect("drv_in_capture", axpyB, "cuLaunchKernel", "B", dim3(1), dim3(128), 0,
           {prm(0, a), prm(8, b), prm(16, alpha), prm(20, n2)}, {ptr_at(0, 0, a), ptr_at(1, 0, b)}, true);
    cudaGraphExec_t exec;
    RK(cudaGraphInstantiate(&exec, graph, 0));
    RK(cudaGraphLaunch(exec, cs));
    RK(cudaStreamSynchronize(cs));
  }
  // 16. A plain launch after the graph: capturing must be false again.
  {
    int n = 5;
    k_ptrs<<<dim3(1), dim3(32), 0, s>>>(a, b, n);
    RK(cudaGetLastError());
    expect("rt_after_graph", rt_func((const void *)k_ptrs), NULL, "rt", dim3(1), dim3(32), 0,
           {prm(0, a), prm(8, b), prm(16, n)}, {ptr_at(0, 0, a), ptr_at(1, 0, b)}, false);
  }
  RK(cudaDeviceSynchronize());
  fclose(g_out);
  printf("gt: %d launches expected\n", g_count);
  return 0;
}
