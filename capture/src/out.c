/*
 * out.c - the per-process output directory and its buffered files.
 *
 * Layout (see FORMAT.md): $KERN_CAPTURE_DIR/pid-<pid>/{meta.json,
 * launches.jsonl, modules.jsonl, modules/<sha256>.cubin, summary.json}.
 * One directory per process id, so the processes of a multi-process engine
 * never write into the same files.
 *
 * Buffering contract: records are appended to a large in-memory buffer and
 * written with write(2) only when it fills up or at exit; there is no
 * per-record flush.  Each record is appended whole, so a buffer boundary never
 * splits a line across a crash except for the final partial write.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kcap.h"

struct kcap_file {
  int fd;
  char *buf;
  size_t n, cap;
};

static char g_dir[4096];
static kcap_file_t g_launch = {-1, NULL, 0, 0}, g_module = {-1, NULL, 0, 0};
static int g_closed;

static int mkdir_p(const char *path) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
    *p = '/';
  }
  return (mkdir(tmp, 0755) && errno != EEXIST) ? -1 : 0;
}

static void write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      kcap_log("write failed: %s", strerror(errno));
      return;
    }
    p += w;
    n -= (size_t)w;
  }
}

static int open_file(kcap_file_t *f, const char *name, size_t cap) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f->fd < 0) {
    kcap_log("cannot open %s: %s", path, strerror(errno));
    return -1;
  }
  f->buf = malloc(cap);
  f->cap = f->buf ? cap : 0;
  f->n = 0;
  return 0;
}

static void flush_file(kcap_file_t *f) {
  if (f->fd >= 0 && f->n) write_all(f->fd, f->buf, f->n);
  f->n = 0;
}

void kcap_file_append(kcap_file_t *f, const char *p, size_t n) {
  if (f->fd < 0 || g_closed) return;
  if (f->n + n > f->cap) flush_file(f);
  if (n > f->cap) {
    write_all(f->fd, p, n);
    return;
  }
  memcpy(f->buf + f->n, p, n);
  f->n += n;
}

kcap_file_t *kcap_launch_file(void) { return &g_launch; }
kcap_file_t *kcap_module_file(void) { return &g_module; }
const char *kcap_out_dir(void) { return g_dir; }

/* meta.json: what a reader needs to interpret the rest (format version,
 * process identity, clock).  Written once at start. */
static void write_meta(void) {
  sb_t b = {0};
  sb_lit(&b, "{\"format\":\"kern-capture\",\"version\":");
  sb_u64(&b, KCAP_FORMAT_VERSION);
  sb_lit(&b, ",\"pid\":");
  sb_u64(&b, (uint64_t)getpid());
  sb_lit(&b, ",\"ppid\":");
  sb_u64(&b, (uint64_t)getppid());
  sb_lit(&b, ",\"clock\":\"CLOCK_MONOTONIC\",\"start_t_ns\":");
  sb_u64(&b, kcap_now_ns());
  struct timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  sb_lit(&b, ",\"start_unix_s\":");
  sb_u64(&b, (uint64_t)rt.tv_sec);
  int dv = 0;
  if (kdrv.DriverGetVersion && kdrv.DriverGetVersion(&dv) == CUDA_SUCCESS) {
    sb_lit(&b, ",\"driver_version\":");
    sb_u64(&b, (uint64_t)dv);
  }
  sb_lit(&b, ",\"options\":{\"ptrs\":");
  sb_u64(&b, (uint64_t)kcfg.ptrs);
  sb_lit(&b, ",\"modules\":");
  sb_u64(&b, (uint64_t)kcfg.dump_modules);
  sb_lit(&b, ",\"max_launches\":");
  sb_u64(&b, kcfg.max_launches);
  sb_lit(&b, ",\"filter\":");
  sb_str(&b, kcfg.name_filter);
  sb_lit(&b, "},\"cmdline\":[");
  FILE *cf = fopen("/proc/self/cmdline", "rb");
  if (cf) {
    char arg[4096];
    size_t k = 0;
    int c, first = 1;
    while ((c = fgetc(cf)) != EOF) {
      if (c && k + 1 < sizeof arg) {
        arg[k++] = (char)c;
        continue;
      }
      if (c) continue; /* over-long argument: truncated */
      arg[k] = 0;
      if (!first) sb_lit(&b, ",");
      sb_str(&b, arg);
      first = 0;
      k = 0;
    }
    fclose(cf);
  }
  sb_lit(&b, "]}\n");
  char path[4200];
  snprintf(path, sizeof path, "%s/meta.json", g_dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    write_all(fd, b.p, b.n);
    close(fd);
  }
  free(b.p);
}

int kcap_out_init(void) {
  const char *base = getenv("KERN_CAPTURE_DIR");
  if (!base || !*base) base = "kern-capture";
  snprintf(g_dir, sizeof g_dir, "%s/pid-%d", base, (int)getpid());
  char mods[4200];
  snprintf(mods, sizeof mods, "%s/modules", g_dir);
  if (mkdir_p(g_dir) || mkdir_p(mods)) {
    kcap_log("cannot create %s: %s", g_dir, strerror(errno));
    return -1;
  }
  if (open_file(&g_launch, "launches.jsonl", 8u << 20) ||
      open_file(&g_module, "modules.jsonl", 256u << 10))
    return -1;
  write_meta();
  return 0;
}

void kcap_out_flush_all(void) {
  flush_file(&g_launch);
  flush_file(&g_module);
}

/* summary.json doubles as the "capture closed cleanly" marker: a directory
 * without it was cut short (the data before the last buffer is still valid). */
void kcap_out_close(uint64_t launches, uint64_t dropped) {
  if (g_closed || g_launch.fd < 0) return;
  kcap_out_flush_all();
  g_closed = 1;
  close(g_launch.fd);
  close(g_module.fd);
  sb_t b = {0};
  sb_lit(&b, "{\"launches\":");
  sb_u64(&b, launches);
  sb_lit(&b, ",\"dropped\":");
  sb_u64(&b, dropped);
  sb_lit(&b, ",\"end_t_ns\":");
  sb_u64(&b, kcap_now_ns());
  sb_lit(&b, "}\n");
  char path[4200];
  snprintf(path, sizeof path, "%s/summary.json", g_dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    write_all(fd, b.p, b.n);
    close(fd);
  }
  free(b.p);
}

void kcap_out_forget(void) {
  /* In a fork child the buffers hold the parent's records: dropping them
   * (and never writing again) keeps the parent's files intact. */
  g_launch.n = g_module.n = 0;
  if (g_launch.fd >= 0) close(g_launch.fd);
  if (g_module.fd >= 0) close(g_module.fd);
  g_launch.fd = g_module.fd = -1;
  g_closed = 1;
}
