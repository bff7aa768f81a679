/* A stand-in libcublasLt.so.13 for the CPU test of kern_runtime.cuda.cublaslt through
 * nvmath's bindings (tests/test_cublaslt_bindings.py): every call the runtime makes, logged
 * to stdout one line each with the values it received. The heuristic offers four
 * candidates: 100 and 101 usable (101 fails to run), 102 with a bad state, 103 needing a
 * 1 GiB workspace. Built with `cc -shared -fPIC`; also holds cuDriverGetVersion, which
 * nvmath calls first (built a second time as the stand-in libcuda.so.1). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct { uint64_t data[8]; } algo_t;
typedef struct { algo_t algo; size_t workspaceSize; int state; float wavesCount; int reserved[4]; } heur_t;
typedef void *obj;

#define LOG(...) do { printf(__VA_ARGS__); fflush(stdout); } while (0)
static intptr_t next_obj = 0x1000;
static uint64_t value(const void *buf, size_t n) { uint64_t v = 0; memcpy(&v, buf, n); return v; }

int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
size_t cublasLtGetVersion(void) { return 130101; }
const char *cublasLtGetStatusName(int s) { return s == 15 ? "CUBLAS_STATUS_NOT_SUPPORTED" : "CUBLAS_STATUS_?"; }
const char *cublasLtGetStatusString(int s) { return "fake"; }
int cublasLtCreate(obj *h) { *h = (obj)next_obj++; LOG("create\n"); return 0; }
int cublasLtDestroy(obj h) { LOG("destroy\n"); return 0; }
int cublasLtMatmulDescCreate(obj *d, int compute, int scale) {
    *d = (obj)next_obj++; LOG("desc %d %d\n", compute, scale); return 0; }
int cublasLtMatmulDescDestroy(obj d) { LOG("desc_destroy\n"); return 0; }
int cublasLtMatmulDescSetAttribute(obj d, int attr, const void *buf, size_t n) {
    LOG("desc_attr %d %zu %llu\n", attr, n, (unsigned long long)value(buf, n)); return 0; }
int cublasLtMatrixLayoutCreate(obj *l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
    *l = (obj)next_obj++;
    LOG("layout %d %llu %llu %lld\n", type, (unsigned long long)rows, (unsigned long long)cols, (long long)ld);
    return 0; }
int cublasLtMatrixLayoutDestroy(obj l) { LOG("layout_destroy\n"); return 0; }
int cublasLtMatmulPreferenceCreate(obj *p) { *p = (obj)next_obj++; LOG("pref\n"); return 0; }
int cublasLtMatmulPreferenceDestroy(obj p) { LOG("pref_destroy\n"); return 0; }
int cublasLtMatmulPreferenceSetAttribute(obj p, int attr, const void *buf, size_t n) {
    LOG("pref_attr %d %zu %llu\n", attr, n, (unsigned long long)value(buf, n)); return 0; }
int cublasLtMatmulAlgoGetHeuristic(obj h, obj d, obj a, obj b, obj c, obj dd, obj p, int req,
                                   heur_t *res, int *count) {
    for (int i = 0; i < 4; i++) {
        memset(&res[i], 0, sizeof res[i]);
        res[i].algo.data[0] = 100 + i;
        res[i].workspaceSize = i == 3 ? (size_t)1 << 30 : 4096;
        res[i].state = i == 2 ? 7 : 0;
    }
    *count = 4;
    LOG("heuristic %d %zu\n", req, sizeof(heur_t));
    return 0; }
int cublasLtMatmul(obj h, obj d, const float *alpha, const void *A, obj ad, const void *B, obj bd,
                   const float *beta, const void *C, obj cd, void *D, obj dd, const algo_t *algo,
                   void *ws, size_t ws_bytes, void *stream) {
    LOG("matmul %g %g %p %p %p %p %llu %p %zu %p\n", *alpha, *beta, A, B, C, D,
        (unsigned long long)algo->data[0], ws, ws_bytes, stream);
    return algo->data[0] == 101 ? 15 : 0; }
