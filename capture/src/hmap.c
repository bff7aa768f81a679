/*
 * hmap.c - a map from pointer-sized keys to pointers (open addressing,
 * linear probing, power-of-two capacity, load <= 1/2).  Key 0 marks an empty
 * slot, so 0 is not a valid key (no CUDA handle is NULL once valid).
 */
#include <stdlib.h>
#include <string.h>

#include "kcap.h"

static size_t slot(uintptr_t k, size_t cap) {
  uint64_t x = (uint64_t)k;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x & (cap - 1);
}

void *hmap_get(const hmap_t *m, uintptr_t key) {
  if (!m->cap || !key) return NULL;
  for (size_t i = slot(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
    if (m->keys[i] == key) return m->vals[i];
    if (!m->keys[i]) return NULL;
  }
}

static void grow(hmap_t *m) {
  size_t ncap = m->cap ? m->cap * 2 : 256;
  uintptr_t *ok = m->keys;
  void **ov = m->vals;
  size_t ocap = m->cap;
  m->keys = calloc(ncap, sizeof *m->keys);
  m->vals = calloc(ncap, sizeof *m->vals);
  if (!m->keys || !m->vals) abort();
  m->cap = ncap;
  m->n = 0;
  for (size_t i = 0; i < ocap; i++)
    if (ok[i]) hmap_put(m, ok[i], ov[i]);
  free(ok);
  free(ov);
}

void hmap_put(hmap_t *m, uintptr_t key, void *val) {
  if (!key) return;
  if ((m->n + 1) * 2 > m->cap) grow(m);
  for (size_t i = slot(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
    if (m->keys[i] == key) {
      m->vals[i] = val;
      return;
    }
    if (!m->keys[i]) {
      m->keys[i] = key;
      m->vals[i] = val;
      m->n++;
      return;
    }
  }
}

void hmap_clear(hmap_t *m) {
  if (!m->cap) return;
  memset(m->keys, 0, m->cap * sizeof *m->keys);
  memset(m->vals, 0, m->cap * sizeof *m->vals);
  m->n = 0;
}
