/*
 * ptrs.c - is a 64-bit value a device pointer, and into which allocation?
 *
 * cuMemGetAddressRange answers it; a small most-recently-used cache of known
 * ranges avoids most driver calls (a forward pass draws its pointers from a
 * few allocator segments).  Values that are not pointers are never cached
 * (they could become pointers later), and the whole cache is dropped whenever
 * device memory is freed or unmapped (inject.c watches those calls), so a
 * cached range is never stale.
 */
#include <string.h>

#include "kcap.h"

#define NCACHE 64
static uint64_t c_start[NCACHE], c_size[NCACHE];
static int c_n, c_next;

void kcap_ptr_forget_all(void) { c_n = 0; c_next = 0; }

int kcap_ptr_range(uint64_t v, uint64_t *start, uint64_t *size) {
  /* No allocation starts in the first page; skipping small values avoids a
   * driver call for every small integer. */
  if (v < 4096 || v >= (1ull << 57)) return 0;
  for (int i = 0; i < c_n; i++)
    if (v - c_start[i] < c_size[i]) {
      *start = c_start[i];
      *size = c_size[i];
      return 1;
    }
  CUdeviceptr base = 0;
  size_t sz = 0;
  if (kdrv.MemGetAddressRange(&base, &sz, (CUdeviceptr)v) != CUDA_SUCCESS || !sz) return 0;
  if (v - base >= sz) return 0;
  int slot = c_n < NCACHE ? c_n++ : (c_next++ % NCACHE);
  c_start[slot] = base;
  c_size[slot] = sz;
  *start = base;
  *size = sz;
  return 1;
}
