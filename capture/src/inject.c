/*
 * inject.c - entry point (InitializeInjection), configuration, the CUPTI
 * callback and process-exit handling.
 *
 * Contract with the driver: when CUDA_INJECTION64_PATH names this library,
 * cuInit dlopens it and calls InitializeInjection once; returning 1 means
 * success.  We subscribe one CUPTI callback and enable exactly the callback
 * ids we need (launch APIs, module/library loads and lookups, frees), so the
 * rest of the driver API pays nothing.  CUPTI allows only one subscriber per
 * process: the torch profiler or nsys cannot run alongside.
 *
 * Environment:
 *   KERN_CAPTURE_DIR           output base (default ./kern-capture); files go
 *                              to <base>/pid-<pid>/
 *   KERN_CAPTURE_PTRS=0        do not annotate device pointers
 *   KERN_CAPTURE_MODULES=0     do not write cubins (the index is still written)
 *   KERN_CAPTURE_MAX_LAUNCHES  stop recording after N launch records
 *   KERN_CAPTURE_FILTER        record only launches whose name contains this
 *   KERN_CAPTURE_DISABLE=1     load but record nothing
 */
#define _GNU_SOURCE /* PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cupti.h> /* also brings generated_cuda_meta.h (per-API param structs) */

#include "kcap.h"

kcap_cfg_t kcfg = {1, 1, 0, NULL};

/* Recursive: a driver call we make inside a callback can load a module (lazy
 * loading), and that MODULE_LOADED callback arrives on the same thread while we
 * hold the lock. */
static pthread_mutex_t g_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static CUpti_SubscriberHandle g_sub;
static int g_active;
static uint64_t g_seq, g_recorded, g_dropped;

static __thread int t_in_cb;     /* our own driver calls must not recurse */
static __thread uint64_t t_enter_ns;

static const CUpti_CallbackId k_launch_cbids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
};

/* Calls during which a module can be loaded, and that tell (at exit) which
 * handle the load belongs to. */
static const CUpti_CallbackId k_bind_cbids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuModuleLoad,
    CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData,
    CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx,
    CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary,
    CUPTI_DRIVER_TRACE_CBID_cuModuleGetFunction,
    CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData,
    CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile,
    CUPTI_DRIVER_TRACE_CBID_cuLibraryGetKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLibraryGetModule,
    CUPTI_DRIVER_TRACE_CBID_cuKernelGetFunction,
};

/* Calls after which a value cached as "not a device address" may be stale. */
static const CUpti_CallbackId k_alloc_cbids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,           CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged,       CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz, CUPTI_DRIVER_TRACE_CBID_cuMemMap,
    CUPTI_DRIVER_TRACE_CBID_cuMemSetAccess,          CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2,       CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2,
};

/* Calls after which a cached allocation range may be stale. */
static const CUpti_CallbackId k_free_cbids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,   CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz, CUPTI_DRIVER_TRACE_CBID_cuMemUnmap,
    CUPTI_DRIVER_TRACE_CBID_cuMemRelease,   CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree,
};

static int is_launch(CUpti_CallbackId id) {
  for (size_t i = 0; i < sizeof k_launch_cbids / sizeof *k_launch_cbids; i++)
    if (k_launch_cbids[i] == id) return 1;
  return 0;
}

static void *launch_handle(CUpti_CallbackId id, const void *p) {
  if (id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx || id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz)
    return (void *)((const cuLaunchKernelEx_params *)p)->f;
  if (id == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel ||
      id == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz)
    return (void *)((const cuLaunchCooperativeKernel_params *)p)->f;
  return (void *)((const cuLaunchKernel_params *)p)->f;
}

/* At the exit of a load/lookup call: bind the modules loaded inside it. */
static void bind_exit(CUpti_CallbackId id, const void *p) {
  switch (id) {
  case CUPTI_DRIVER_TRACE_CBID_cuModuleLoad:
    kcap_bind_pending((uintptr_t)*((const cuModuleLoad_params *)p)->module);
    break;
  case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData:
    kcap_bind_pending((uintptr_t)*((const cuModuleLoadData_params *)p)->module);
    break;
  case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx:
    kcap_bind_pending((uintptr_t)*((const cuModuleLoadDataEx_params *)p)->module);
    break;
  case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary:
    kcap_bind_pending((uintptr_t)*((const cuModuleLoadFatBinary_params *)p)->module);
    break;
  case CUPTI_DRIVER_TRACE_CBID_cuModuleGetFunction:
    kcap_bind_pending((uintptr_t)((const cuModuleGetFunction_params *)p)->hmod);
    break;
  /* Library loads: bind the library handle only.  Asking for its CUmodule here
   * (cuLibraryGetModule) would force every lazily loaded library to load -
   * every fatbin of every CUDA library in the process. */
  case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData:
    kcap_bind_pending((uintptr_t)*((const cuLibraryLoadData_params *)p)->library);
    break;
  case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile:
    kcap_bind_pending((uintptr_t)*((const cuLibraryLoadFromFile_params *)p)->library);
    break;
  case CUPTI_DRIVER_TRACE_CBID_cuLibraryGetKernel:
    kcap_bind_pending((uintptr_t)((const cuLibraryGetKernel_params *)p)->library);
    break;
  case CUPTI_DRIVER_TRACE_CBID_cuLibraryGetModule: {
    const cuLibraryGetModule_params *q = p;
    kcap_bind_pending((uintptr_t)q->library);
    if (q->pMod) kcap_bind_pending((uintptr_t)*q->pMod);
    break;
  }
  case CUPTI_DRIVER_TRACE_CBID_cuKernelGetFunction:
    kcap_bind_pending_for_handle((void *)((const cuKernelGetFunction_params *)p)->kernel);
    break;
  default:
    break;
  }
}

static void on_resource(CUpti_CallbackId id, const CUpti_ResourceData *rd) {
  uint32_t uid = 0;
  switch (id) {
  case CUPTI_CBID_RESOURCE_MODULE_LOADED: {
    const CUpti_ModuleResourceData *m = rd->resourceDescriptor;
    if (rd->context) cuptiGetContextId(rd->context, &uid);
    kcap_module_loaded(m->moduleId, m->pCubin, m->cubinSize, uid);
    break;
  }
  case CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING: {
    const CUpti_ModuleResourceData *m = rd->resourceDescriptor;
    kcap_module_unloading(m->moduleId);
    kcap_func_forget_all(); /* function handles of that module may be reused */
    break;
  }
  case CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING:
    /* Engines may tear contexts down before exit handlers run. */
    kcap_out_flush_all();
    kcap_func_forget_all();
    kcap_ptr_forget_all();
    break;
  default:
    break;
  }
}

static void CUPTIAPI callback(void *ud, CUpti_CallbackDomain dom, CUpti_CallbackId id, const void *data) {
  (void)ud;
  if (!g_active) return;
  if (dom == CUPTI_CB_DOMAIN_RESOURCE) {
    /* Never suppressed: a module loaded by one of our own driver calls must
     * still be indexed (and becomes pending for the call being handled). */
    pthread_mutex_lock(&g_lock);
    if (g_active) on_resource(id, data);
    pthread_mutex_unlock(&g_lock);
    return;
  }
  if (t_in_cb) return; /* a driver call made by this library itself */
  if (dom != CUPTI_CB_DOMAIN_DRIVER_API) return;
  const CUpti_CallbackData *cd = data;
  if (cd->callbackSite == CUPTI_API_ENTER) {
    /* Loads seen from now on belong to this call (pending is per thread). */
    kcap_pending_clear();
    t_enter_ns = kcap_now_ns();
    return;
  }
  t_in_cb = 1;
  pthread_mutex_lock(&g_lock);
  if (g_active) {
    if (is_launch(id)) {
      void *h = launch_handle(id, cd->functionParams);
      kcap_bind_pending_for_handle(h);
      uint64_t seq = g_seq++;
      if (kcfg.max_launches && g_recorded >= kcfg.max_launches) {
        g_dropped++;
      } else {
        CUresult r = cd->functionReturnValue ? *(const CUresult *)cd->functionReturnValue : CUDA_SUCCESS;
        kcap_launch_record((int)id, cd->functionParams, r, t_enter_ns, cd->contextUid, seq);
        g_recorded++;
      }
    } else {
      int is_free = 0, is_alloc = 0;
      for (size_t i = 0; i < sizeof k_free_cbids / sizeof *k_free_cbids; i++)
        is_free |= k_free_cbids[i] == id;
      for (size_t i = 0; i < sizeof k_alloc_cbids / sizeof *k_alloc_cbids; i++)
        is_alloc |= k_alloc_cbids[i] == id;
      if (is_free)
        kcap_ptr_forget_all();
      else if (is_alloc)
        kcap_ptr_forget_negative();
      else
        bind_exit(id, cd->functionParams);
    }
  }
  pthread_mutex_unlock(&g_lock);
  kcap_pending_clear();
  t_in_cb = 0;
}

/* Exit path: flush everything once.  A thread stuck inside a callback must
 * not hang the exit, so the lock is only tried for up to ~1 s. */
static void finish(void) {
  int locked = 0;
  for (int i = 0; i < 1000 && !locked; i++) {
    locked = pthread_mutex_trylock(&g_lock) == 0;
    if (!locked) nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  if (g_active) {
    g_active = 0;
    kcap_out_close(g_recorded, g_dropped);
  }
  if (locked) pthread_mutex_unlock(&g_lock);
}

static struct sigaction g_old_term;
static void on_sigterm(int sig) {
  /* Best effort: write what is buffered, then die the default way. */
  if (pthread_mutex_trylock(&g_lock) == 0) {
    if (g_active) {
      g_active = 0;
      kcap_out_close(g_recorded, g_dropped);
    }
    pthread_mutex_unlock(&g_lock);
  }
  sigaction(SIGTERM, &g_old_term, NULL);
  raise(sig);
}

static void fork_prepare(void) { pthread_mutex_lock(&g_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&g_lock); }
static void fork_child(void) {
  /* A forked child shares nothing with CUDA; it must not write the parent's
   * buffered records a second time. */
  g_active = 0;
  kcap_out_forget();
  pthread_mutex_unlock(&g_lock);
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
  const char *s = getenv(name);
  return (s && *s) ? strtoull(s, NULL, 10) : dflt;
}

#define CHECK(call)                                                  \
  do {                                                               \
    CUptiResult _r = (call);                                         \
    if (_r != CUPTI_SUCCESS) {                                       \
      const char *_s = NULL;                                         \
      cuptiGetResultString(_r, &_s);                                 \
      kcap_log("%s failed: %s", #call, _s ? _s : "?");               \
      return 0;                                                      \
    }                                                                \
  } while (0)

__attribute__((visibility("default"))) int InitializeInjection(void) {
  static int done;
  if (done++) return 1;
  if (env_u64("KERN_CAPTURE_DISABLE", 0)) return 1;
  kcfg.ptrs = (int)env_u64("KERN_CAPTURE_PTRS", 1);
  kcfg.dump_modules = (int)env_u64("KERN_CAPTURE_MODULES", 1);
  kcfg.max_launches = env_u64("KERN_CAPTURE_MAX_LAUNCHES", 0);
  const char *flt = getenv("KERN_CAPTURE_FILTER");
  kcfg.name_filter = (flt && *flt) ? flt : NULL;
  if (kcap_drv_init()) {
    kcap_log("driver entry points missing; capture disabled");
    return 0;
  }
  if (kcap_out_init()) return 0;
  CHECK(cuptiSubscribe(&g_sub, (CUpti_CallbackFunc)callback, NULL));
  for (size_t i = 0; i < sizeof k_launch_cbids / sizeof *k_launch_cbids; i++)
    CHECK(cuptiEnableCallback(1, g_sub, CUPTI_CB_DOMAIN_DRIVER_API, k_launch_cbids[i]));
  for (size_t i = 0; i < sizeof k_bind_cbids / sizeof *k_bind_cbids; i++)
    CHECK(cuptiEnableCallback(1, g_sub, CUPTI_CB_DOMAIN_DRIVER_API, k_bind_cbids[i]));
  for (size_t i = 0; i < sizeof k_free_cbids / sizeof *k_free_cbids; i++)
    CHECK(cuptiEnableCallback(1, g_sub, CUPTI_CB_DOMAIN_DRIVER_API, k_free_cbids[i]));
  for (size_t i = 0; i < sizeof k_alloc_cbids / sizeof *k_alloc_cbids; i++)
    CHECK(cuptiEnableCallback(1, g_sub, CUPTI_CB_DOMAIN_DRIVER_API, k_alloc_cbids[i]));
  CHECK(cuptiEnableCallback(1, g_sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED));
  CHECK(cuptiEnableCallback(1, g_sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING));
  CHECK(cuptiEnableCallback(1, g_sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING));
  g_active = 1;
  atexit(finish);
  pthread_atfork(fork_prepare, fork_parent, fork_child);
  struct sigaction cur;
  if (sigaction(SIGTERM, NULL, &cur) == 0 && cur.sa_handler == SIG_DFL) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sigemptyset(&sa.sa_mask);
    g_old_term = cur;
    sigaction(SIGTERM, &sa, NULL);
  }
  kcap_log("capturing to %s", kcap_out_dir());
  return 1;
}

/* Backstop for exits that skip atexit ordering (e.g. dlclose). */
__attribute__((destructor)) static void kcap_fini(void) { finish(); }
