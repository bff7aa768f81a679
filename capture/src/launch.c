/*
 * launch.c - one JSON line per kernel launch (FORMAT.md, "launches.jsonl").
 *
 * Called at the exit of a launch API, when the handle's module is loaded and
 * every argument the caller passed is still valid (the call has not returned
 * to the caller yet).  Decodes the per-API parameter structs of CUPTI into
 * one shape, then writes geometry, attributes, and the parameter bytes -
 * from kernelParams or from the packed `extra` buffer, cut by the layout.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cupti.h> /* also brings generated_cuda_meta.h (per-API param structs) */

#include "kcap.h"

typedef struct {
  const char *api;
  int ptsz;
  void *f;
  unsigned grid[3], block[3], smem;
  CUstream stream;
  void **kp;
  void **extra;
  const CUlaunchConfig *cfg;
} launch_t;

#define GEOM(p)                                                        \
  do {                                                                 \
    L->f = (void *)(p)->f;                                             \
    L->grid[0] = (p)->gridDimX, L->grid[1] = (p)->gridDimY, L->grid[2] = (p)->gridDimZ; \
    L->block[0] = (p)->blockDimX, L->block[1] = (p)->blockDimY, L->block[2] = (p)->blockDimZ; \
    L->smem = (p)->sharedMemBytes;                                     \
    L->stream = (p)->hStream;                                          \
    L->kp = (p)->kernelParams;                                         \
  } while (0)

static int decode(int cbid, const void *params, launch_t *L) {
  memset(L, 0, sizeof *L);
  switch (cbid) {
  case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
  case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz: {
    /* The two param structs are identical in layout. */
    const cuLaunchKernel_params *p = params;
    GEOM(p);
    L->extra = p->extra;
    L->ptsz = cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz;
    L->api = L->ptsz ? "cuLaunchKernel_ptsz" : "cuLaunchKernel";
    return 0;
  }
  case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
  case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: {
    const cuLaunchCooperativeKernel_params *p = params;
    GEOM(p);
    L->ptsz = cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz;
    L->api = L->ptsz ? "cuLaunchCooperativeKernel_ptsz" : "cuLaunchCooperativeKernel";
    return 0;
  }
  case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
  case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
    const cuLaunchKernelEx_params *p = params;
    const CUlaunchConfig *c = p->config;
    L->f = (void *)p->f;
    L->kp = p->kernelParams;
    L->extra = p->extra;
    L->cfg = c;
    if (c) {
      L->grid[0] = c->gridDimX, L->grid[1] = c->gridDimY, L->grid[2] = c->gridDimZ;
      L->block[0] = c->blockDimX, L->block[1] = c->blockDimY, L->block[2] = c->blockDimZ;
      L->smem = c->sharedMemBytes;
      L->stream = c->hStream;
    }
    L->ptsz = cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz;
    L->api = L->ptsz ? "cuLaunchKernelEx_ptsz" : "cuLaunchKernelEx";
    return 0;
  }
  }
  return -1;
}

static void put_dim3(sb_t *b, const char *key, const unsigned v[3]) {
  sb_lit(b, key);
  sb_lit(b, "[");
  sb_u64(b, v[0]);
  sb_lit(b, ",");
  sb_u64(b, v[1]);
  sb_lit(b, ",");
  sb_u64(b, v[2]);
  sb_lit(b, "]");
}

static const char *attr_name(unsigned id) {
  static const char *names[] = {
      "ignore", "access_policy_window", "cooperative", "synchronization_policy",
      "cluster_dimension", "cluster_scheduling_policy_preference",
      "programmatic_stream_serialization", "programmatic_event", "priority",
      "mem_sync_domain_map", "mem_sync_domain", "preferred_cluster_dimension",
      "launch_completion_event", "device_updatable_kernel_node",
      "preferred_shared_memory_carveout", "unknown_15", "nvlink_util_centric_scheduling"};
  return id < sizeof names / sizeof *names ? names[id] : NULL;
}

/* Launch attributes of cuLaunchKernelEx: id, name, decoded value for the
 * scalar/dim3 kinds, and the raw 64-byte value union (trailing zero bytes
 * trimmed) for every kind, so nothing is lost for kinds not decoded here. */
static void write_attrs(sb_t *b, const CUlaunchConfig *c) {
  sb_lit(b, ",\"attrs\":[");
  if (c && c->attrs)
    for (unsigned i = 0; i < c->numAttrs; i++) {
      const CUlaunchAttribute *a = &c->attrs[i];
      const unsigned char *raw = (const unsigned char *)&a->value;
      size_t n = sizeof a->value;
      while (n > 4 && raw[n - 1] == 0) n--;
      if (i) sb_lit(b, ",");
      sb_lit(b, "{\"id\":");
      sb_u64(b, (uint64_t)a->id);
      sb_lit(b, ",\"name\":");
      sb_str(b, attr_name((unsigned)a->id));
      switch ((unsigned)a->id) {
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
      case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION: {
        unsigned d[3] = {a->value.clusterDim.x, a->value.clusterDim.y, a->value.clusterDim.z};
        put_dim3(b, ",\"value\":", d);
        break;
      }
      case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
      case CU_LAUNCH_ATTRIBUTE_PRIORITY:
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
      case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: {
        int32_t v;
        memcpy(&v, raw, sizeof v);
        sb_lit(b, ",\"value\":");
        sb_i64(b, v);
        break;
      }
      default:
        break;
      }
      sb_lit(b, ",\"raw\":");
      sb_hex(b, raw, n);
      sb_lit(b, "}");
    }
  sb_lit(b, "]");
}

static void write_fattr(sb_t *b, const kcap_func_t *f) {
  if (!f->attr_ok) {
    sb_lit(b, ",\"fattr\":null");
    return;
  }
  sb_lit(b, ",\"fattr\":{\"regs\":");
  sb_i64(b, f->regs);
  sb_lit(b, ",\"static_smem\":");
  sb_i64(b, f->static_smem);
  sb_lit(b, ",\"local_mem\":");
  sb_i64(b, f->local_mem);
  sb_lit(b, ",\"const_mem\":");
  sb_i64(b, f->const_mem);
  sb_lit(b, ",\"max_threads\":");
  sb_i64(b, f->max_threads);
  sb_lit(b, ",\"binary_version\":");
  sb_i64(b, f->binary_version);
  sb_lit(b, ",\"ptx_version\":");
  sb_i64(b, f->ptx_version);
  int cl[3] = {f->cluster_w, f->cluster_h, f->cluster_d};
  sb_lit(b, ",\"required_cluster\":[");
  for (int i = 0; i < 3; i++) {
    if (i) sb_lit(b, ",");
    sb_i64(b, cl[i]);
  }
  sb_lit(b, "]}");
}

/* One parameter: bytes plus, for each 8-byte-aligned word (alignment taken
 * in the kernel's parameter space) inside it, an annotation if the word
 * points into a device allocation. */
static void write_param(sb_t *b, size_t off, size_t size, const unsigned char *src, uint64_t now) {
  sb_lit(b, "{\"offset\":");
  sb_u64(b, off);
  sb_lit(b, ",\"size\":");
  sb_u64(b, size);
  sb_lit(b, ",\"bytes\":");
  sb_hex(b, src, size);
  if (kcfg.ptrs) {
    int first = 1;
    for (size_t o = (off + 7) & ~(size_t)7; o + 8 <= off + size; o += 8) {
      uint64_t v, start, rsize;
      memcpy(&v, src + (o - off), 8);
      if (!kcap_ptr_range(v, now, &start, &rsize)) continue;
      sb_lit(b, first ? ",\"ptrs\":[" : ",");
      first = 0;
      sb_lit(b, "{\"at\":");
      sb_u64(b, o - off);
      sb_lit(b, ",\"value\":");
      sb_u64(b, v);
      sb_lit(b, ",\"range_start\":");
      sb_u64(b, start);
      sb_lit(b, ",\"range_size\":");
      sb_u64(b, rsize);
      sb_lit(b, ",\"offset\":");
      sb_u64(b, v - start);
      sb_lit(b, "}");
    }
    if (!first) sb_lit(b, "]");
  }
  sb_lit(b, "}");
}

/* `extra` is a key/value list ending with CU_LAUNCH_PARAM_END; the keys we
 * read are BUFFER_POINTER (the packed argument buffer) and BUFFER_SIZE (a
 * pointer to its size_t length). */
static void parse_extra(void **extra, const unsigned char **buf, size_t *size) {
  *buf = NULL;
  *size = 0;
  for (int i = 0; extra && i < 64 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
      *buf = extra[i + 1];
    else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
      *size = *(const size_t *)extra[i + 1];
  }
  if (!*buf) *size = 0;
}

static void write_params(sb_t *b, const launch_t *L, const kcap_func_t *f, uint64_t now) {
  const unsigned char *xbuf = NULL;
  size_t xsize = 0;
  if (L->kp) {
    sb_lit(b, ",\"args\":\"params\"");
  } else if (L->extra) {
    parse_extra(L->extra, &xbuf, &xsize);
    sb_lit(b, ",\"args\":\"extra\",\"extra_size\":");
    sb_u64(b, xsize);
  } else {
    sb_lit(b, ",\"args\":\"none\"");
  }
  if (f->nparams < 0 || (!L->kp && f->nparams > 0 && !xbuf)) {
    sb_lit(b, ",\"params\":null");
    if (xbuf) {
      sb_lit(b, ",\"raw\":");
      sb_hex(b, xbuf, xsize);
    }
    return;
  }
  sb_lit(b, ",\"params\":[");
  for (int i = 0; i < f->nparams; i++) {
    size_t off = f->poff[i], sz = f->psize[i];
    if (i) sb_lit(b, ",");
    if (L->kp) {
      write_param(b, off, sz, (const unsigned char *)L->kp[i], now);
    } else if (off + sz <= xsize) {
      write_param(b, off, sz, xbuf + off, now);
    } else {
      /* The layout says more than the packed buffer holds: keep the slot
       * with what is there (FORMAT.md: "bytes" may be shorter than size). */
      size_t have = off < xsize ? xsize - off : 0;
      write_param(b, off, have, xbuf + (have ? off : 0), now);
    }
  }
  sb_lit(b, "]");
}

void kcap_launch_record(int cbid, const void *params, CUresult result, uint64_t t_ns,
                        uint64_t ctx_uid, uint64_t seq) {
  launch_t L;
  if (decode(cbid, params, &L)) return;
  kcap_func_t *f = kcap_func_info(L.f);
  if (kcfg.name_filter && (!f->name || !strstr(f->name, kcfg.name_filter))) return;

  /* NULL on a _ptsz API means the per-thread default stream. */
  CUstream qs = (L.ptsz && !L.stream) ? CU_STREAM_PER_THREAD : L.stream;
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  int cap_ok = kdrv.StreamIsCapturing(qs, &cs) == CUDA_SUCCESS;

  static __thread sb_t b;
  b.n = 0;
  sb_lit(&b, "{\"seq\":");
  sb_u64(&b, seq);
  sb_lit(&b, ",\"t_ns\":");
  sb_u64(&b, t_ns);
  sb_lit(&b, ",\"tid\":");
  sb_u64(&b, (uint64_t)syscall(SYS_gettid));
  sb_lit(&b, ",\"api\":");
  sb_str(&b, L.api);
  sb_lit(&b, ",\"result\":");
  sb_u64(&b, (uint64_t)result);
  sb_lit(&b, ",\"ctx\":");
  sb_u64(&b, ctx_uid);
  sb_lit(&b, ",\"stream\":");
  sb_u64(&b, (uint64_t)(uintptr_t)L.stream);
  sb_lit(&b, ",\"capturing\":");
  sb_lit(&b, !cap_ok ? "null" : (cs != CU_STREAM_CAPTURE_STATUS_NONE ? "true" : "false"));
  sb_lit(&b, ",\"handle\":");
  sb_str(&b, f->is_kernel ? "kernel" : "function");
  sb_lit(&b, ",\"name\":");
  sb_str(&b, f->name);
  sb_lit(&b, ",\"module\":");
  sb_str(&b, kcap_module_sha(f->module));
  sb_lit(&b, ",\"module_id\":");
  if (f->module >= 0)
    sb_u64(&b, kcap_module_cupti_id(f->module));
  else
    sb_lit(&b, "null");
  sb_lit(&b, ",\"module_how\":");
  sb_str(&b, f->module_how);
  put_dim3(&b, ",\"grid\":", L.grid);
  put_dim3(&b, ",\"block\":", L.block);
  sb_lit(&b, ",\"smem\":");
  sb_u64(&b, L.smem);
  write_attrs(&b, L.cfg);
  write_fattr(&b, f);
  write_params(&b, &L, f, t_ns);
  sb_lit(&b, "}\n");
  kcap_file_append(kcap_launch_file(), b.p, b.n);
}
