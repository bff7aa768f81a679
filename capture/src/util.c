/*
 * util.c - clock, diagnostics and the JSON string builder.
 *
 * The builder never fails: on allocation failure it aborts, because a
 * silently truncated record would be worse than a crash of the capture run.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kcap.h"

uint64_t kcap_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Diagnostics go to stderr with a fixed prefix; they are rare (setup
 * failures), never per launch. */
void kcap_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("[kern-capture] ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

void sb_reserve(sb_t *b, size_t extra) {
  if (b->n + extra + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 1024;
  while (cap < b->n + extra + 1) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    kcap_log("out of memory");
    abort();
  }
  b->p = p;
  b->cap = cap;
}

void sb_raw(sb_t *b, const char *s, size_t n) {
  sb_reserve(b, n);
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

void sb_lit(sb_t *b, const char *s) { sb_raw(b, s, strlen(s)); }

void sb_str(sb_t *b, const char *s) {
  if (!s) {
    sb_raw(b, "null", 4);
    return;
  }
  size_t n = strlen(s);
  sb_reserve(b, n * 6 + 2);
  char *o = b->p + b->n;
  *o++ = '"';
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      *o++ = '\\';
      *o++ = (char)c;
    } else if (c < 0x20 || c >= 0x7f) {
      /* Non-ASCII bytes are escaped one by one (as U+00XX) so the output is
       * always valid JSON even for names that are not valid UTF-8. */
      o += sprintf(o, "\\u%04x", c);
    } else {
      *o++ = (char)c;
    }
  }
  *o++ = '"';
  b->n = (size_t)(o - b->p);
  b->p[b->n] = 0;
}

void sb_u64(sb_t *b, uint64_t v) {
  char t[24];
  int k = 0;
  do {
    t[k++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  sb_reserve(b, (size_t)k);
  while (k) b->p[b->n++] = t[--k];
  b->p[b->n] = 0;
}

void sb_i64(sb_t *b, int64_t v) {
  if (v < 0) {
    sb_raw(b, "-", 1);
    sb_u64(b, (uint64_t)0 - (uint64_t)v);
  } else {
    sb_u64(b, (uint64_t)v);
  }
}

void sb_hex(sb_t *b, const void *p, size_t n) {
  static const char dig[] = "0123456789abcdef";
  const unsigned char *s = p;
  sb_reserve(b, 2 * n + 2);
  char *o = b->p + b->n;
  *o++ = '"';
  for (size_t i = 0; i < n; i++) {
    *o++ = dig[s[i] >> 4];
    *o++ = dig[s[i] & 15];
  }
  *o++ = '"';
  b->n = (size_t)(o - b->p);
  b->p[b->n] = 0;
}
