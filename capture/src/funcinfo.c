/*
 * funcinfo.c - the static facts of a launch handle: name, parameter layout,
 * module and function attributes, cached per handle.
 *
 * A launch handle is either a CUfunction (module-loaded, e.g. Triton through
 * cuModuleLoadData) or a CUkernel (library kernel: every runtime <<<>>> launch
 * in CUDA 12/13).  cuFunc* calls fail on a CUkernel, so a failing
 * cuFuncGetName means "try it as a CUkernel": cuKernelGetFunction gives the
 * function of that kernel in the current context, and the rest is read from
 * that function (cuKernel* calls are the fallback).  All of this must happen
 * at API exit: with lazy loading the module only exists after the first
 * launch has loaded it.
 */
#include <stdlib.h>
#include <string.h>

#include "kcap.h"

static hmap_t g_funcs;        /* handle -> kcap_func_t* (complete entries only) */
static kcap_func_t g_scratch; /* an incomplete lookup, recomputed next launch */

static void free_info(kcap_func_t *f) {
  free(f->name);
  free(f->poff);
  free(f->psize);
  memset(f, 0, sizeof *f);
}

void kcap_func_forget_all(void) {
  for (size_t i = 0; i < g_funcs.cap; i++)
    if (g_funcs.keys[i] && g_funcs.vals[i]) {
      free_info(g_funcs.vals[i]);
      free(g_funcs.vals[i]);
    }
  hmap_clear(&g_funcs);
}

/* The function of a handle in the current context; *is_kernel tells whether
 * the handle was a CUkernel.  *name gets the driver-owned name if known. */
static CUfunction resolve_fn(void *h, int *is_kernel, const char **name) {
  *is_kernel = 0;
  *name = NULL;
  if (kdrv.FuncGetName(name, (CUfunction)h) == CUDA_SUCCESS) return (CUfunction)h;
  *name = NULL;
  *is_kernel = 1;
  CUfunction fn = NULL;
  if (kdrv.KernelGetFunction && kdrv.KernelGetFunction(&fn, (CUkernel)h) == CUDA_SUCCESS && fn) {
    if (kdrv.FuncGetName(name, fn) != CUDA_SUCCESS) *name = NULL;
  } else {
    fn = NULL;
  }
  if (!*name && kdrv.KernelGetName && kdrv.KernelGetName(name, (CUkernel)h) != CUDA_SUCCESS)
    *name = NULL;
  return fn;
}

/* Parameter layout: index i is valid until the driver answers
 * CUDA_ERROR_INVALID_VALUE (past the end); any other error = unreadable. */
static int read_layout(kcap_func_t *f, void *h) {
  size_t cap = 16;
  f->poff = malloc(cap * sizeof(size_t));
  f->psize = malloc(cap * sizeof(size_t));
  for (int pass = 0; pass < 2; pass++) {
    int n = 0;
    for (;;) {
      size_t off = 0, sz = 0;
      CUresult r;
      if (pass == 0) {
        if (!f->fn) break;
        r = kdrv.FuncGetParamInfo(f->fn, (size_t)n, &off, &sz);
      } else {
        /* Also for handles that passed as CUfunction: if the function path
         * failed, the handle may still be a library kernel. */
        if (!kdrv.KernelGetParamInfo) break;
        r = kdrv.KernelGetParamInfo((CUkernel)h, (size_t)n, &off, &sz);
      }
      if (r == CUDA_ERROR_INVALID_VALUE) {
        f->nparams = n;
        return 0;
      }
      if (r != CUDA_SUCCESS) break;
      if ((size_t)n == cap) {
        cap *= 2;
        f->poff = realloc(f->poff, cap * sizeof(size_t));
        f->psize = realloc(f->psize, cap * sizeof(size_t));
      }
      f->poff[n] = off;
      f->psize[n] = sz;
      n++;
      if (n > 4096) break; /* parameter space is at most 32 KB */
    }
  }
  f->nparams = -1;
  return -1;
}

static void read_attrs(kcap_func_t *f) {
  if (!f->fn) return;
  CUfunction fn = f->fn;
  int ok = 1;
#define A(field, attr) ok &= kdrv.FuncGetAttribute(&f->field, attr, fn) == CUDA_SUCCESS
  A(regs, CU_FUNC_ATTRIBUTE_NUM_REGS);
  A(static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
  A(local_mem, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
  A(const_mem, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
  A(max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  A(binary_version, CU_FUNC_ATTRIBUTE_BINARY_VERSION);
  A(ptx_version, CU_FUNC_ATTRIBUTE_PTX_VERSION);
#undef A
  /* Cluster requirements exist only on sm_90+; absence is not an error. */
  if (kdrv.FuncGetAttribute(&f->cluster_w, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, fn) ||
      kdrv.FuncGetAttribute(&f->cluster_h, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, fn) ||
      kdrv.FuncGetAttribute(&f->cluster_d, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH, fn))
    f->cluster_w = f->cluster_h = f->cluster_d = 0;
  f->attr_ok = ok;
}

/* Module handle(s) of a launch handle: its CUmodule in this context and, for
 * a library kernel, its CUlibrary. */
static void module_handles(void *h, int is_kernel, CUfunction fn, uintptr_t *mod, uintptr_t *lib) {
  CUmodule m = NULL;
  CUlibrary l = NULL;
  *mod = *lib = 0;
  if (fn && kdrv.FuncGetModule(&m, fn) == CUDA_SUCCESS) *mod = (uintptr_t)m;
  if ((is_kernel || !*mod) && kdrv.KernelGetLibrary && kdrv.KernelGetLibrary(&l, (CUkernel)h) == CUDA_SUCCESS)
    *lib = (uintptr_t)l;
}

void kcap_bind_pending_for_handle(void *h) {
  if (!kcap_pending_count() || !h) return;
  int is_kernel;
  const char *nm;
  CUfunction fn = resolve_fn(h, &is_kernel, &nm);
  uintptr_t mod, lib;
  module_handles(h, is_kernel, fn, &mod, &lib);
  kcap_bind_pending(mod);
  kcap_bind_pending(lib);
}

kcap_func_t *kcap_func_info(void *h) {
  kcap_func_t *c = hmap_get(&g_funcs, (uintptr_t)h);
  if (c) return c;
  kcap_func_t *f = &g_scratch;
  free_info(f);
  const char *nm = NULL;
  f->fn = resolve_fn(h, &f->is_kernel, &nm);
  f->name = nm ? strdup(nm) : NULL;
  read_layout(f, h);
  read_attrs(f);
  uintptr_t mod, lib;
  module_handles(h, f->is_kernel, f->fn, &mod, &lib);
  f->module = kcap_module_of_handle(mod);
  if (f->module < 0) f->module = kcap_module_of_handle(lib);
  if (f->module >= 0) {
    f->module_how = "load";
  } else {
    int ambiguous = 0;
    f->module = kcap_module_by_name(f->name, &ambiguous);
    f->module_how = f->module >= 0 ? "name" : (ambiguous ? "ambiguous" : NULL);
  }
  if (!f->name || f->nparams < 0) return f; /* incomplete: not cached */
  c = malloc(sizeof *c);
  if (!c) return f;
  *c = *f;
  memset(f, 0, sizeof *f); /* ownership of the arrays moved to c */
  hmap_put(&g_funcs, (uintptr_t)h, c);
  return c;
}
