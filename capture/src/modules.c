/*
 * modules.c - every loaded module: dumped once by sha256, indexed by CUPTI
 * module id, and tied to the driver handles (CUmodule / CUlibrary) that
 * launches later refer to.
 *
 * Why the binding is needed: CUPTI's MODULE_LOADED callback carries only the
 * module id and the cubin bytes, never the CUmodule handle, while a launch
 * only gives a CUfunction/CUkernel.  The load callback fires synchronously on
 * the thread that is inside the driver call causing the load (an explicit
 * cuModuleLoad*, a cuLibraryLoad*, or - with lazy loading - the first launch
 * or lookup of a kernel).  So loads are queued as "pending" on the thread, and
 * the exit of that driver call, which knows the resulting handle, binds them.
 * If that fails (a load inside an API we do not track), the launch falls back
 * to finding its symbol name in the cubins not yet bound.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kcap.h"

typedef struct {
  uint32_t cupti_id;
  char sha[65];
  int unloaded;
  int bound;
  unsigned char *copy; /* cubin bytes kept for the name fallback until bound */
  size_t size;
} module_t;

static module_t *g_mods;
static int g_nmods, g_capmods;
static hmap_t g_handle_to_mod; /* handle -> (index + 1) */
static size_t g_copy_bytes;
#define COPY_BUDGET ((size_t)1 << 30) /* memory kept for the name fallback */

#define MAX_PENDING 8
static __thread int t_pending[MAX_PENDING];
static __thread int t_npending;

static void dump(const char *sha, const void *cubin, size_t size) {
  char path[4300];
  snprintf(path, sizeof path, "%s/modules/%s.cubin", kcap_out_dir(), sha);
  struct stat st;
  if (stat(path, &st) == 0 && (size_t)st.st_size == size) return; /* already dumped */
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const char *p = cubin;
  while (size) {
    ssize_t w = write(fd, p, size);
    if (w <= 0) break;
    p += w;
    size -= (size_t)w;
  }
  close(fd);
}

void kcap_module_loaded(uint32_t cupti_id, const void *cubin, size_t size, uint64_t ctx_uid) {
  if (g_nmods == g_capmods) {
    g_capmods = g_capmods ? 2 * g_capmods : 64;
    g_mods = realloc(g_mods, (size_t)g_capmods * sizeof *g_mods);
    if (!g_mods) abort();
  }
  module_t *m = &g_mods[g_nmods];
  memset(m, 0, sizeof *m);
  m->cupti_id = cupti_id;
  m->size = size;
  if (cubin && size) {
    kcap_sha256_hex(cubin, size, m->sha);
    if (kcfg.dump_modules) dump(m->sha, cubin, size);
    if (g_copy_bytes + size <= COPY_BUDGET && (m->copy = malloc(size))) {
      memcpy(m->copy, cubin, size);
      g_copy_bytes += size;
    }
  }
  sb_t b = {0};
  sb_lit(&b, "{\"module_id\":");
  sb_u64(&b, cupti_id);
  sb_lit(&b, ",\"sha256\":");
  sb_str(&b, m->sha[0] ? m->sha : NULL);
  sb_lit(&b, ",\"size\":");
  sb_u64(&b, size);
  sb_lit(&b, ",\"t_ns\":");
  sb_u64(&b, kcap_now_ns());
  sb_lit(&b, ",\"ctx\":");
  sb_u64(&b, ctx_uid);
  sb_lit(&b, "}\n");
  kcap_file_append(kcap_module_file(), b.p, b.n);
  free(b.p);
  if (t_npending < MAX_PENDING) t_pending[t_npending++] = g_nmods;
  g_nmods++;
}

void kcap_module_unloading(uint32_t cupti_id) {
  for (int i = 0; i < g_nmods; i++)
    if (g_mods[i].cupti_id == cupti_id && !g_mods[i].unloaded) {
      g_mods[i].unloaded = 1;
      if (g_mods[i].copy) {
        g_copy_bytes -= g_mods[i].size;
        free(g_mods[i].copy);
        g_mods[i].copy = NULL;
      }
    }
}

void kcap_pending_clear(void) { t_npending = 0; }
int kcap_pending_count(void) { return t_npending; }

void kcap_bind_pending(uintptr_t handle) {
  if (!handle || !t_npending) return;
  /* One driver call loads one module per context; if several are pending the
   * last one is the one the handle resolved to. */
  int idx = t_pending[t_npending - 1];
  hmap_put(&g_handle_to_mod, handle, (void *)(uintptr_t)(idx + 1));
  module_t *m = &g_mods[idx];
  m->bound = 1;
  if (m->copy) {
    g_copy_bytes -= m->size;
    free(m->copy);
    m->copy = NULL;
  }
}

int kcap_module_of_handle(uintptr_t handle) {
  uintptr_t v = (uintptr_t)hmap_get(&g_handle_to_mod, handle);
  if (!v) return -1;
  int idx = (int)v - 1;
  return g_mods[idx].unloaded ? -1 : idx;
}

static int contains_symbol(const unsigned char *p, size_t n, const char *name) {
  /* ELF string tables hold NUL-terminated names: match "\0name\0". */
  size_t k = strlen(name);
  if (!k || n < k + 2) return 0;
  const unsigned char *end = p + n - k - 1;
  for (const unsigned char *q = p + 1; q < end;) {
    const unsigned char *hit = memchr(q, (unsigned char)name[0], (size_t)(end - q));
    if (!hit) return 0;
    if (hit[-1] == 0 && hit[k] == 0 && memcmp(hit, name, k) == 0) return 1;
    q = hit + 1;
  }
  return 0;
}

int kcap_module_by_name(const char *name, int *ambiguous) {
  int found = -1;
  *ambiguous = 0;
  if (!name) return -1;
  for (int i = g_nmods - 1; i >= 0; i--) {
    module_t *m = &g_mods[i];
    if (m->unloaded || !m->copy || !contains_symbol(m->copy, m->size, name)) continue;
    if (found >= 0 && strcmp(g_mods[found].sha, m->sha) != 0) {
      *ambiguous = 1;
      return -1;
    }
    if (found < 0) found = i;
  }
  return found;
}

const char *kcap_module_sha(int idx) {
  return (idx >= 0 && idx < g_nmods && g_mods[idx].sha[0]) ? g_mods[idx].sha : NULL;
}

uint32_t kcap_module_cupti_id(int idx) {
  return (idx >= 0 && idx < g_nmods) ? g_mods[idx].cupti_id : 0;
}
