/*
 * ptrs.c - is a 64-bit value a device pointer, and into which allocation?
 *
 * cuMemGetAddressRange answers it, but a launch can carry hundreds of 8-byte
 * words (cuBLAS packs a 1.7 KB struct) and a model has hundreds of weight
 * allocations, so two caches sit in front of the driver:
 *   - known ranges, sorted by start (allocations never overlap): binary search;
 *   - values known NOT to be device addresses (direct-mapped set).
 * Staleness contract: the range cache is dropped whenever device memory is
 * freed or unmapped, the negative cache whenever memory is allocated or mapped
 * (inject.c watches those driver calls); in addition both expire on a timer
 * (ranges after 1 s, negatives after 50 ms) so that an allocation or free the
 * callbacks did not see can make an answer wrong only briefly.
 */
#include <string.h>

#include "kcap.h"

#define NRANGES 16384
static uint64_t r_start[NRANGES], r_size[NRANGES];
static int r_n;
static uint64_t r_born_ns;

#define NNEG 8192 /* power of two */
static uint64_t neg[NNEG];
static uint64_t neg_born_ns;

#define RANGE_TTL_NS 1000000000ull
#define NEG_TTL_NS 50000000ull

void kcap_ptr_forget_all(void) { r_n = 0; }
void kcap_ptr_forget_negative(void) { memset(neg, 0, sizeof neg); }

static int neg_slot(uint64_t v) {
  uint64_t x = v * 0x9e3779b97f4a7c15ull;
  return (int)(x >> 51) & (NNEG - 1);
}

/* Index of the last range with start <= v, or -1. */
static int find(uint64_t v) {
  int lo = 0, hi = r_n - 1, best = -1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (r_start[mid] <= v) {
      best = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return best;
}

static void insert(uint64_t start, uint64_t size) {
  if (r_n == NRANGES) r_n = 0; /* full: start over (rare; correctness kept) */
  int i = find(start) + 1;
  if (i > 0 && r_start[i - 1] == start) { /* same base re-allocated: update */
    r_size[i - 1] = size;
    return;
  }
  memmove(r_start + i + 1, r_start + i, (size_t)(r_n - i) * sizeof *r_start);
  memmove(r_size + i + 1, r_size + i, (size_t)(r_n - i) * sizeof *r_size);
  r_start[i] = start;
  r_size[i] = size;
  r_n++;
}

int kcap_ptr_range(uint64_t v, uint64_t now_ns, uint64_t *start, uint64_t *size) {
  /* No allocation starts in the first page, and user virtual addresses stay
   * below 2^57 on every 64-bit Linux: anything else is not a pointer. */
  if (v < 4096 || v >= (1ull << 57)) return 0;
  if (now_ns - r_born_ns > RANGE_TTL_NS) {
    r_n = 0;
    r_born_ns = now_ns;
  }
  if (now_ns - neg_born_ns > NEG_TTL_NS) {
    kcap_ptr_forget_negative();
    neg_born_ns = now_ns;
  }
  int i = find(v);
  if (i >= 0 && v - r_start[i] < r_size[i]) {
    *start = r_start[i];
    *size = r_size[i];
    return 1;
  }
  int ns = neg_slot(v);
  if (neg[ns] == v) return 0;
  CUdeviceptr base = 0;
  size_t sz = 0;
  if (kdrv.MemGetAddressRange(&base, &sz, (CUdeviceptr)v) != CUDA_SUCCESS || !sz || v - base >= sz) {
    neg[ns] = v;
    return 0;
  }
  insert(base, sz);
  *start = base;
  *size = sz;
  return 1;
}
