"""Why did an L2 prefetch before the attention stand-in make the synthetic decode step slower
(bench_l2_prefetch.py)?  Three measurements on one card, from the repository root:

    python3 packages/kern-gen/kernels/build.py /tmp/own
    python3 packages/kern-gen/kernels/probe_l2_micro.py /tmp/own

A. throughput of cp.async.bulk.prefetch.L2 over 2 GB (chunk size x threads a block, grid =
   the SMs) against a plain read kernel over the same bytes;
B. the o_proj GEMV (2560 x 4096) read from L2 (prefetched, then a 30 µs spin) against read
   from HBM: 36 distinct weights in one graph, µs a GEMV;
C. the prefetch issued before its kernel's grid-dependency wait (as shipped) or after it.
"""
import ctypes as C
import sys
from pathlib import Path

import cupy
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gemv_tma as bt  # noqa: E402
from bench_l2_prefetch import SPIN, launch  # noqa: E402

SRC = r"""
template <unsigned long long CHUNK, bool AFTER>
__device__ void pf(const char* p, unsigned long long bytes) {
  if (AFTER) asm volatile("griddepcontrol.wait;" ::: "memory");
  const unsigned long long n = (bytes + CHUNK - 1) / CHUNK;
  for (unsigned long long c = blockIdx.x + (unsigned long long)threadIdx.x * gridDim.x; c < n;
       c += (unsigned long long)gridDim.x * blockDim.x) {
    const unsigned long long off = c * CHUNK;
    const unsigned size = (unsigned)(bytes - off < CHUNK ? bytes - off : CHUNK);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p + off), "r"(size) : "memory");
  }
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (!AFTER) asm volatile("griddepcontrol.wait;" ::: "memory");
}
extern "C" __global__ void pf4k(const char* p, unsigned long long b) { pf<4096, false>(p, b); }
extern "C" __global__ void pf32k(const char* p, unsigned long long b) { pf<32768, false>(p, b); }
extern "C" __global__ void pf256k(const char* p, unsigned long long b) { pf<262144, false>(p, b); }
extern "C" __global__ void pf32k_after(const char* p, unsigned long long b) { pf<32768, true>(p, b); }
// loads-based prefetch: every thread streams 16-byte words of W into registers (the GEMV's
// own load form), before the wait; the values are discarded
template <int U>
__device__ void ldpf(const int4* p, unsigned long long n, int* sink) {
  int acc = 0;
  const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += U * step) {
    int4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const unsigned long long j = i + u * step;
      if (j < n) asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.s32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(p + j));
      else v[u] = make_int4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].w;
  }
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (acc == 0x7fffffff) *sink = acc;
}
extern "C" __global__ void ldpf4(const int4* p, unsigned long long n, int* sink) { ldpf<4>(p, n, sink); }
extern "C" __global__ void ldpf8(const int4* p, unsigned long long n, int* sink) { ldpf<8>(p, n, sink); }
// per-line prefetch instruction, one 256-byte line a thread a step, before the wait
extern "C" __global__ void linepf(const char* p, unsigned long long bytes) {
  for (unsigned long long off = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) * 256;
       off < bytes; off += (unsigned long long)gridDim.x * blockDim.x * 256)
    asm volatile("prefetch.global.L2::evict_last [%0];" :: "l"(p + off) : "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
// the attention stand-in doing the prefetch itself: wait, issue (bulk prefetch) or load W,
// then spin until ns after the wait; the kernel stays resident while the bytes arrive
template <bool LOAD>
__device__ void spin_with(unsigned long long ns, const char* p, unsigned long long bytes, int* sink) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const unsigned long long tid = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  const unsigned long long nt = (unsigned long long)gridDim.x * blockDim.x;
  int acc = 0;
  if (LOAD) {
    const int4* q = reinterpret_cast<const int4*>(p);
    for (unsigned long long i = tid; i < bytes / 16; i += 4 * nt) {
      int4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const unsigned long long j = i + u * nt;
        if (j < bytes / 16) asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.s32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(q + j));
        else v[u] = make_int4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].w;
    }
  } else {
    for (unsigned long long off = tid * 32768; off < bytes; off += nt * 32768) {
      const unsigned size = (unsigned)(bytes - off < 32768 ? bytes - off : 32768);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p + off), "r"(size) : "memory");
    }
  }
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
  if (acc == 0x7fffffff) *sink = acc;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
extern "C" __global__ void spin_pf(unsigned long long ns, const char* p, unsigned long long b, int* s) { spin_with<false>(ns, p, b, s); }
extern "C" __global__ void spin_ld(unsigned long long ns, const char* p, unsigned long long b, int* s) { spin_with<true>(ns, p, b, s); }
// the attention stand-in as a latency chain: warps 0-3 each follow HOPS dependent loads
// through a random table (every hop a fresh HBM line), while warps 4.. (if any) stream
// this block's share of W into registers and discard it (the "L2 fill")
extern "C" __global__ void chase_fill(const int* table, int hops, const int4* w,
                                      unsigned long long n16, int* sink) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  int acc = 0;
  if (threadIdx.x < 128) {
    int i = (blockIdx.x * 128 + threadIdx.x) * 977;
    for (int h = 0; h < hops; ++h) i = table[i & ((1 << 26) - 1)];
    acc = i;
  } else if (n16) {
    const unsigned long long per = (n16 + gridDim.x - 1) / gridDim.x;
    const unsigned long long lo = blockIdx.x * per, hi = lo + per < n16 ? lo + per : n16;
    const int lane = threadIdx.x - 128, nl = blockDim.x - 128;
    for (unsigned long long j = lo + lane; j < hi; j += 8 * nl) {
      int4 v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const unsigned long long q = j + u * nl;
        if (q < hi) asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.s32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(w + q));
        else v[u] = make_int4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].w;
    }
  }
  if (acc == 0x7fffffff) *sink = acc;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
// E: the latency chain and the stream on different SMs (one block a SM: grid <= SMs).
// Blocks < nchase: 128 threads follow `hops` dependent loads, block's time -> out_ns.
// The others stream their share of w: mode 1 LSU loads (all threads, 8 x 16 B in flight a
// thread), mode 2 cp.async.bulk into a 4 x 16 KB shared ring (one thread), mode 0 idle.
__device__ __forceinline__ unsigned sa(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
extern "C" __global__ void chase_sep(const int* table, int hops, const char* w,
                                     unsigned long long bytes, int mode, unsigned long long* out_ns,
                                     int nchase, int* sink) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) unsigned long long bars[4];
  asm volatile("griddepcontrol.wait;" ::: "memory");
  int acc = 0;
  if ((int)blockIdx.x < nchase) {
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    int i = (blockIdx.x * 128 + threadIdx.x) * 977;
    for (int h = 0; h < hops; ++h) i = table[i & ((1 << 26) - 1)];
    acc = i;
    __syncthreads();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    if (threadIdx.x == 0) out_ns[blockIdx.x] = t1 - t0;
  } else if (mode) {
    const unsigned long long ns = gridDim.x - nchase, b = blockIdx.x - nchase;
    const unsigned long long per = (bytes / ns + 15) / 16 * 16;
    const unsigned long long lo = b * per, hi = lo + per < bytes ? lo + per : bytes;
    if (mode == 1) {
      const int4* q = reinterpret_cast<const int4*>(w);
      for (unsigned long long j = lo / 16 + threadIdx.x; j < hi / 16; j += 8 * blockDim.x) {
        int4 v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          const unsigned long long x = j + u * blockDim.x;
          if (x < hi / 16) asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.s32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(q + x));
          else v[u] = make_int4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].w;
      }
    } else if (threadIdx.x == 0) {
      for (int s = 0; s < 4; ++s)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sa(&bars[s])) : "memory");
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      unsigned long long c = 0;
      for (unsigned long long off = lo; off < hi; off += 16384, ++c) {
        const int s = c % 4;
        const unsigned size = (unsigned)(hi - off < 16384 ? hi - off : 16384);
        if (c >= 4) {
          unsigned done, par = ((c / 4) - 1) & 1;
          do { asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                            " selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(sa(&bars[s])), "r"(par) : "memory");
          } while (!done);
        }
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sa(&bars[s])), "r"(size) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(sa(ring + s * 16384)), "l"(w + off), "r"(size), "r"(sa(&bars[s])) : "memory");
      }
      for (unsigned long long k = (c > 4 ? c - 4 : 0); k < c; ++k) {
        const int s = k % 4;
        unsigned done, par = (k / 4) & 1;
        do { asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                          " selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(sa(&bars[s])), "r"(par) : "memory");
        } while (!done);
      }
      acc = ring[0];
    }
  }
  if (acc == 0x7fffffff) *sink = acc;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
extern "C" __global__ void rd(const int4* p, unsigned long long n, int* sink) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  int acc = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) { int4 v = __ldcs(p + i); acc ^= v.x ^ v.w; }
  if (acc == 0x7fffffff) *sink = acc;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
"""


def main():
    own = sys.argv[1]
    gemv = bt.Gemv(own)
    mod = cupy.RawModule(code=SRC, options=("-std=c++17",))
    spin = cupy.RawModule(code=SPIN).get_function("spin")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(torch.cuda.get_device_name(0), "SMs", sms,
          "L2 MB", torch.cuda.get_device_properties(0).L2_cache_size / 2**20, flush=True)
    big = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")
    u64 = C.c_uint64

    print("\n== A: GB/s over 2 GB (graph of 1 launch)")
    for name in ("pf4k", "pf32k", "pf256k"):
        for thr in (32, 128):
            f = mod.get_function(name)
            us = bt.graph_us(lambda: launch(f, (sms, 1, 1), (thr, 1, 1),
                                            [u64(big.data_ptr()), u64(big.numel())]))
            print(f"  {name:7s} {thr:3d} threads: {us:8.1f} µs  {big.numel() / us / 1e3:7.0f} GB/s",
                  flush=True)
    f = mod.get_function("rd")
    us = bt.graph_us(lambda: launch(f, (sms * 8, 1, 1), (512, 1, 1),
                                    [u64(big.data_ptr()), u64(big.numel() // 16), u64(sink.data_ptr())]))
    print(f"  read kernel      : {us:8.1f} µs  {big.numel() / us / 1e3:7.0f} GB/s", flush=True)
    big = None   # free the 2 GB before the weights

    gen = torch.Generator(device="cuda").manual_seed(0)
    W = [(torch.randn((2560, 4096), generator=gen, device="cuda") * 0.02).to(torch.bfloat16)
         for _ in range(36)]
    a = torch.randn((1, 4096), generator=gen, device="cuda").to(torch.bfloat16)
    c = torch.empty((1, 2560), dtype=torch.bfloat16, device="cuda")
    for spin_us in (30, 10):
        print(f"\n== B/C: o_proj GEMV after [prefetch] + spin {spin_us} µs, 36 distinct W; µs a layer")
        base = None
        for name in (None, "pf32k", "pf256k", "linepf", "ldpf4", "spin_0", "spin_pf", "spin_ld"):
            f = mod.get_function("spin_pf" if name == "spin_0" else name) if name else None

            def chain(f=f, name=name):
                for w in W:
                    if name and name.startswith("ldpf"):
                        launch(f, (sms * 2, 1, 1), (256, 1, 1),
                               [u64(w.data_ptr()), u64(w.numel() // 8), u64(sink.data_ptr())])
                    elif f is not None and not name.startswith("spin_"):
                        launch(f, (sms, 1, 1), (32 if name.startswith("pf") else 256, 1, 1),
                               [u64(w.data_ptr()), u64(w.numel() * 2)])
                    if name and name.startswith("spin_"):
                        launch(f, (sms, 1, 1), (256, 1, 1), [u64(spin_us * 1000), u64(w.data_ptr()),
                                                             u64(0 if name == "spin_0" else w.numel() * 2),
                                                             u64(sink.data_ptr())])
                    else:
                        launch(spin, (32, 1, 1), (128, 1, 1), [u64(spin_us * 1000)])
                    gemv(a, w, c)
            us = bt.graph_us(chain) / len(W)
            base = us if base is None else base
            print(f"  {name or 'no prefetch':12s} {us:7.2f} ({us - base:+5.2f})", flush=True)

    table = torch.randint(0, 1 << 26, (1 << 26,), dtype=torch.int32, device="cuda",
                          generator=gen)
    chase = mod.get_function("chase_fill")
    print("\n== D: latency chain (512 blocks x 128 threads, HOPS dependent HBM loads) "
          "+ o_proj GEMV; with loader warps streaming W_o; µs a layer")
    for hops in (6, 12):
        for loaders, fill in ((0, False), (64, False), (64, True), (128, True)):
            def chain(loaders=loaders, fill=fill, gemm=True):
                for w in W:
                    launch(chase, (512, 1, 1), (128 + loaders, 1, 1),
                           [C.c_uint64(table.data_ptr()), C.c_int32(hops), u64(w.data_ptr()),
                            u64(w.numel() // 8 if fill else 0), u64(sink.data_ptr())])
                    if gemm:
                        gemv(a, w, c)
            both = bt.graph_us(chain) / len(W)
            alone = bt.graph_us(lambda: chain(gemm=False)) / len(W)
            print(f"  hops {hops:2d} loader threads {loaders:3d} fill {fill!s:5s}: "
                  f"chain alone {alone:6.2f}  chain + GEMV {both:6.2f}", flush=True)

    sep = mod.get_function("chase_sep")
    sep.max_dynamic_shared_size_bytes = 65536
    out_ns = torch.zeros(256, dtype=torch.int64, device="cuda")
    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    print("\n== E: 64 chase blocks (128 threads, HOPS dependent loads) beside 64 blocks "
          "streaming 1 GB/36 a launch on other SMs; 36 launches; chase block µs (median of "
          "blocks and launches) / kernel µs")
    for hops in (1, 4, 8):
        row = f"  hops {hops}:"
        for mode, label in ((0, "idle"), (1, "LSU"), (2, "TMA")):
            ts = []

            def once(mode=mode, hops=hops, i=0):
                launch(sep, (128, 1, 1), (128, 1, 1),
                       [C.c_uint64(table.data_ptr()), C.c_int32(hops),
                        u64(big.data_ptr() + i * (big.numel() // 36) // 256 * 256),
                        u64(big.numel() // 36 // 256 * 256), C.c_int32(mode),
                        u64(out_ns.data_ptr()), C.c_int32(64), u64(sink.data_ptr())], smem=65536)

            def chain(mode=mode, hops=hops):
                for i in range(36):
                    once(mode, hops, i)
            k_us = bt.graph_us(chain) / 36
            for i in range(36):
                once(mode, hops, i)
                torch.cuda.synchronize()
                ts += (out_ns[:64].double() / 1e3).tolist()
            ts.sort()
            row += f"  {label} {ts[len(ts) // 2]:6.2f} / {k_us:6.2f}"
        print(row, flush=True)
    big = None

    def gemv_only():
        for w in W:
            gemv(a, w, c)
    print(f"  GEMV chain alone (HBM): {bt.graph_us(gemv_only) / len(W):7.2f} µs a GEMV")
    for w in W[:1]:
        def hot():
            for _ in range(36):
                gemv(a, w, c)
        print(f"  one W 36 times (L2 hot): {bt.graph_us(hot) / 36:7.2f} µs a GEMV", flush=True)


if __name__ == "__main__":
    main()
