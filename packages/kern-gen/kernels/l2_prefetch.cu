// kern own kernels: prefetch weight ranges into L2 while the kernels around them do not use
// HBM.  See ABI.md section 7.
//
// Why an own kernel (the exception to mining): a decode step streams every weight once and
// is bound by HBM, but between the GEMVs sit kernels that barely read it (rope, attention,
// the norms: ~0.5 ms of a Qwen3-4B step on the H200, issue 16).  Nothing a capture holds
// overlaps them with the next GEMVs' weight stream; this kernel asks the L2 for the next
// weights so that the GEMVs read them from there.  It changes no value anywhere: results
// are bit-identical with or without it.
//
// Contract, kern_l2_prefetch(p0, b0, p1, b1, p2, b2, p3, b3):
//   up to four ranges p_i[0 .. b_i) (b_i = 0: unused); each p_i 16-byte aligned and
//   b_i % 16 == 0 (a bf16 [n, k] weight with k % 8 == 0, or a prefix of one whole rows long,
//   is both).  Reads nothing into registers, writes nothing: each CHUNK-byte piece of a range
//   is one cp.async.bulk.prefetch.L2 (a hint; the L2 may drop it).  Any grid and block shape
//   is correct; the ranges' chunks are numbered in order and chunk c is issued by block
//   c % gridDim.x, so a grid spread over the SMs uses every SM's copy engine.  It then lets
//   its dependents launch and waits on its own grid dependency before exiting, so that a
//   PDL chain through it stays ordered (a kernel after it that waits, waits for everything
//   before it too).
#include <cstdint>

namespace {
constexpr unsigned long long CHUNK = 32768;   // bytes a prefetch request

__device__ __forceinline__ unsigned long long chunks_of(unsigned long long b) {
  return (b + CHUNK - 1) / CHUNK;
}
}  // namespace

extern "C" __global__ void kern_l2_prefetch(
    const char* __restrict__ p0, unsigned long long b0, const char* __restrict__ p1,
    unsigned long long b1, const char* __restrict__ p2, unsigned long long b2,
    const char* __restrict__ p3, unsigned long long b3) {
  const char* const ps[4] = {p0, p1, p2, p3};
  const unsigned long long bs[4] = {b0, b1, b2, b3};
  const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long first = 0;   // the first chunk number of range r
  for (int r = 0; r < 4; ++r) {
    const unsigned long long n = chunks_of(bs[r]);
    // this thread's chunks c = blockIdx.x + threadIdx.x * gridDim.x + j * step, in range r
    const unsigned long long me = blockIdx.x + (unsigned long long)threadIdx.x * gridDim.x;
    unsigned long long c = me >= first ? me : me + (first - me + step - 1) / step * step;
    for (; c < first + n; c += step) {
      const unsigned long long off = (c - first) * CHUNK;
      const unsigned size = (unsigned)(bs[r] - off < CHUNK ? bs[r] - off : CHUNK);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;"
                   :: "l"(ps[r] + off), "r"(size) : "memory");
    }
    first += n;
  }
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
