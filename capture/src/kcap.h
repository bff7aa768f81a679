/*
 * kcap.h - shared declarations of the kern CUPTI capture library.
 *
 * The library is loaded into an arbitrary CUDA process through
 * CUDA_INJECTION64_PATH and records every loaded module and every kernel
 * launch.  It knows nothing about the process it is injected into (no
 * framework, no model): everything it writes comes from the CUDA driver API
 * and CUPTI.  The output format is specified in ../FORMAT.md; any change to
 * what is written must bump KCAP_FORMAT_VERSION there and here.
 *
 * Concurrency contract: every callback takes g_lock (kcap_lock) for the part
 * that touches shared state, so the tables below need no locking of their own.
 */
#ifndef KCAP_H
#define KCAP_H

#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

#define KCAP_FORMAT_VERSION 1

/* ---------- drv.c: driver entry points resolved at run time ---------------
 * The library is built without libcuda (the CPU machines have none) and must
 * not rely on the host's global symbols (PyTorch loads libcuda RTLD_LOCAL),
 * so every driver function is looked up with dlsym on libcuda's own handle. */
typedef struct {
  CUresult (*FuncGetName)(const char **, CUfunction);
  CUresult (*FuncGetParamInfo)(CUfunction, size_t, size_t *, size_t *);
  CUresult (*FuncGetModule)(CUmodule *, CUfunction);
  CUresult (*FuncGetAttribute)(int *, CUfunction_attribute, CUfunction);
  CUresult (*KernelGetName)(const char **, CUkernel);
  CUresult (*KernelGetParamInfo)(CUkernel, size_t, size_t *, size_t *);
  CUresult (*KernelGetFunction)(CUfunction *, CUkernel);
  CUresult (*KernelGetLibrary)(CUlibrary *, CUkernel);
  CUresult (*LibraryGetModule)(CUmodule *, CUlibrary);
  CUresult (*MemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
  CUresult (*StreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
  CUresult (*StreamIsCapturing_ptsz)(CUstream, CUstreamCaptureStatus *);
  CUresult (*CtxGetDevice)(CUdevice *);
  CUresult (*DriverGetVersion)(int *);
  CUresult (*DeviceGetName)(char *, int, CUdevice);
} kcap_drv_t;
extern kcap_drv_t kdrv;
int kcap_drv_init(void); /* 0 on success; logs what is missing */

/* ---------- util.c: clock, logging, string builder ------------------------ */
uint64_t kcap_now_ns(void); /* CLOCK_MONOTONIC */
void kcap_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

typedef struct {
  char *p;
  size_t n, cap;
} sb_t;
void sb_reserve(sb_t *b, size_t extra);
void sb_raw(sb_t *b, const char *s, size_t n);
void sb_lit(sb_t *b, const char *s); /* raw NUL-terminated text */
void sb_str(sb_t *b, const char *s); /* JSON string, quoted and escaped; NULL -> null */
void sb_u64(sb_t *b, uint64_t v);
void sb_i64(sb_t *b, int64_t v);
void sb_hex(sb_t *b, const void *p, size_t n); /* quoted lowercase hex */

/* ---------- hmap.c: pointer-keyed open-addressing map --------------------- */
typedef struct {
  uintptr_t *keys;
  void **vals;
  size_t cap, n;
} hmap_t;
void *hmap_get(const hmap_t *m, uintptr_t key);
void hmap_put(hmap_t *m, uintptr_t key, void *val);
void hmap_clear(hmap_t *m); /* drops entries, keeps storage; values not freed */

/* ---------- sha256.c ------------------------------------------------------ */
void kcap_sha256_hex(const void *data, size_t n, char out[65]);

/* ---------- out.c: output directory and buffered files -------------------- */
typedef struct kcap_file kcap_file_t;
int kcap_out_init(void);            /* creates <dir>/pid-<pid>/, opens files */
const char *kcap_out_dir(void);     /* the per-process directory */
kcap_file_t *kcap_launch_file(void);
kcap_file_t *kcap_module_file(void);
void kcap_file_append(kcap_file_t *f, const char *p, size_t n); /* buffered */
void kcap_out_flush_all(void);      /* write out every buffer (no fsync) */
void kcap_out_close(uint64_t launches, uint64_t dropped);
void kcap_out_forget(void);         /* fork child: drop buffers, never write */

/* ---------- modules.c: module dump, index, handle -> module --------------- */
/* Module index numbers are positions in the module table (0-based); -1 means
 * unknown. */
void kcap_module_loaded(uint32_t cupti_id, const void *cubin, size_t size,
                        uint64_t ctx_uid);
void kcap_module_unloading(uint32_t cupti_id);
/* Module loads seen on this thread since the last call are "pending"; an API
 * exit that knows which handle the load belonged to binds them. */
void kcap_pending_clear(void);
int kcap_pending_count(void);
void kcap_bind_pending(uintptr_t handle); /* CUmodule or CUlibrary */
int kcap_module_of_handle(uintptr_t handle);
int kcap_module_by_name(const char *name, int *how_ambiguous);
const char *kcap_module_sha(int idx);
uint32_t kcap_module_cupti_id(int idx);

/* ---------- funcinfo.c: per-handle static facts ---------------------------- */
typedef struct {
  int is_kernel;   /* handle was a CUkernel (library kernel), not a CUfunction */
  CUfunction fn;   /* function in the current context (NULL if unresolved) */
  char *name;
  int module;      /* module table index or -1 */
  const char *module_how; /* "load", "name" or NULL */
  int nparams;     /* -1: layout unreadable */
  size_t *poff, *psize;
  int attr_ok;
  int regs, static_smem, local_mem, const_mem, max_threads, binary_version, ptx_version;
  int cluster_w, cluster_h, cluster_d;
} kcap_func_t;
/* Returns facts for a launch handle (CUfunction or CUkernel); never NULL.
 * Must be called at API exit (lazy loading materialises the module inside
 * the launch).  Results are cached per handle once complete. */
kcap_func_t *kcap_func_info(void *handle);
void kcap_func_forget_all(void); /* module unload: handles may be reused */
/* Binds pending module loads to the module of a function/kernel handle. */
void kcap_bind_pending_for_handle(void *handle);

/* ---------- ptrs.c: device pointer ranges ---------------------------------- */
/* 1 and the allocation range if v points into device memory, else 0.
 * now_ns (CLOCK_MONOTONIC) drives the cache expiry. */
int kcap_ptr_range(uint64_t v, uint64_t now_ns, uint64_t *start, uint64_t *size);
void kcap_ptr_forget_all(void);      /* memory was freed: drop known ranges */
void kcap_ptr_forget_negative(void); /* memory was allocated: drop non-pointers */

/* ---------- launch.c: one launch record ------------------------------------ */
void kcap_launch_record(int cbid, const void *params, CUresult result,
                        uint64_t t_ns, uint64_t ctx_uid, uint64_t seq);

/* ---------- inject.c: configuration ---------------------------------------- */
typedef struct {
  int ptrs;            /* annotate device pointers (KERN_CAPTURE_PTRS, default 1) */
  int dump_modules;    /* write cubins (KERN_CAPTURE_MODULES, default 1) */
  uint64_t max_launches; /* 0 = unlimited (KERN_CAPTURE_MAX_LAUNCHES) */
  const char *name_filter; /* substring or NULL (KERN_CAPTURE_FILTER) */
} kcap_cfg_t;
extern kcap_cfg_t kcfg;

#endif
