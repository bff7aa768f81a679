/*
 * drv.c - resolve the driver functions the library calls, at run time.
 *
 * Why not link libcuda: the CPU build machines have no libcuda at all, and on
 * the GPU machine PyTorch/ctypes load libcuda with RTLD_LOCAL, so a library
 * that leaves cu* symbols to the host's global scope fails to load and the
 * driver silently ignores the injection.  dlsym on libcuda's own handle works
 * in every case.  Explicit ABI names are used (e.g. cuMemGetAddressRange_v2)
 * because cuda.h maps the unversioned names with macros.
 */
#include <dlfcn.h>
#include <string.h>

#include "kcap.h"

kcap_drv_t kdrv;

static void *sym(void *h, const char *name, int required, int *missing) {
  void *p = dlsym(h, name);
  if (!p && required) {
    kcap_log("driver symbol %s not found", name);
    (*missing)++;
  }
  return p;
}

int kcap_drv_init(void) {
  /* The driver calls InitializeInjection from cuInit, so libcuda is loaded:
   * RTLD_NOLOAD takes the existing copy and never loads a second one. */
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) h = dlopen("libcuda.so", RTLD_NOW);
  if (!h) {
    kcap_log("cannot open libcuda: %s", dlerror());
    return -1;
  }
  int miss = 0;
  memset(&kdrv, 0, sizeof kdrv);
#define REQ(field, name) *(void **)&kdrv.field = sym(h, name, 1, &miss)
#define OPT(field, name) *(void **)&kdrv.field = sym(h, name, 0, &miss)
  REQ(FuncGetName, "cuFuncGetName");
  REQ(FuncGetParamInfo, "cuFuncGetParamInfo");
  REQ(FuncGetModule, "cuFuncGetModule");
  REQ(FuncGetAttribute, "cuFuncGetAttribute");
  OPT(KernelGetName, "cuKernelGetName");
  OPT(KernelGetParamInfo, "cuKernelGetParamInfo");
  OPT(KernelGetFunction, "cuKernelGetFunction");
  OPT(KernelGetLibrary, "cuKernelGetLibrary");
  OPT(LibraryGetModule, "cuLibraryGetModule");
  REQ(MemGetAddressRange, "cuMemGetAddressRange_v2");
  REQ(StreamIsCapturing, "cuStreamIsCapturing");
  OPT(StreamIsCapturing_ptsz, "cuStreamIsCapturing_ptsz");
  REQ(CtxGetDevice, "cuCtxGetDevice");
  OPT(DriverGetVersion, "cuDriverGetVersion");
  OPT(DeviceGetName, "cuDeviceGetName");
#undef REQ
#undef OPT
  return miss ? -1 : 0;
}
