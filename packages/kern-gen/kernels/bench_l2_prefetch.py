"""Does prefetching the next weights into L2 during the kernels that barely use HBM (rope,
attention, the norms) shorten a decode step?  A probe on synthetic steps, before any
generator change: the shipped GEMV (gemv.cubin) on the Qwen3-4B and SmolLM2-135M shapes,
with spin kernels standing in for attention (``ATT`` µs) and the norms (``NORM`` µs) — each
waits on the grid dependency, then spins, like a latency-bound kernel — and
``kern_l2_prefetch`` (:data:`PREFETCH`: up to four ranges, each 32 KB chunk one
``cp.async.bulk.prefetch.L2``, then ``launch_dependents`` and the grid-dependency wait)
launched right before the attention stand-in with different ranges.  Everything is launched with PDL inside a CUDA graph;
distinct weights per layer (the Qwen3 set is 8 GB, so nothing stays in L2 between steps);
medians of graph replays, µs per step.  From the repository root on the GPU machine:

    python3 packages/kern-gen/kernels/build.py /tmp/own
    python3 packages/kern-gen/kernels/bench_l2_prefetch.py /tmp/own

Result (session 21, H100, docs/measurements.md): the prefetch makes every step slower, and
probe_l2_micro.py shows why: a bulk prefetch does not leave the weights where the GEMV
finds them.  The kernel is therefore a probe's, not one of kern's own kernels.
"""
import ctypes as C
import sys
from pathlib import Path

import cupy
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gemv_tma as bt  # noqa: E402  (launch config structs, Gemv, graph_us)

SPIN = r"""
extern "C" __global__ void spin(unsigned long long ns) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
"""
PREFETCH = r"""
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
"""
MODELS = {   # layers, {name: (n, k)}
    "qwen3": (36, {"qkv": (6144, 2560), "o": (2560, 4096), "gate_up": (19456, 2560),
                   "down": (2560, 9728), "lm_head": (151936, 2560)}),
    "smollm2": (30, {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576),
                     "down": (576, 1536), "lm_head": (49152, 576)}),
}
MB = 1 << 20


def launch(fn, grid, block, args, smem=0):
    """cuLaunchKernelEx with PDL; ``args`` are ctypes values (the exact parameter types)."""
    cfg = bt.Config((C.c_uint * 3)(*grid), (C.c_uint * 3)(*block), smem,
                    C.c_void_p(torch.cuda.current_stream().cuda_stream),
                    C.pointer(bt.ATTR), 1)
    params = (C.c_void_p * len(args))(*[C.cast(C.pointer(v), C.c_void_p) for v in args])
    h = fn.ptr if hasattr(fn, "ptr") else fn.kernel.ptr
    rc = bt.lib.cuLaunchKernelEx(C.byref(cfg), C.c_void_p(h), params, None)
    assert rc == 0, rc


def main():
    own = sys.argv[1]
    gemv = bt.Gemv(own)
    pf = cupy.RawModule(code=PREFETCH, options=("-std=c++17",)).get_function("kern_l2_prefetch")
    spin = cupy.RawModule(code=SPIN).get_function("spin")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(torch.cuda.get_device_name(0), "SMs", sms, flush=True)

    def prefetch(ranges):
        args = []
        for t, nbytes in (ranges + [(None, 0)] * 4)[:4]:
            args += [C.c_uint64(t.data_ptr() if t is not None else 0), C.c_uint64(nbytes)]
        launch(pf, (sms, 1, 1), (32, 1, 1), args)

    def wait(us):
        launch(spin, (32, 1, 1), (128, 1, 1), [C.c_uint64(int(us * 1000))])

    gen = torch.Generator(device="cuda").manual_seed(0)
    for model, (layers, shapes) in MODELS.items():
        W = {name: [(torch.randn(s, generator=gen, device="cuda") * 0.02).to(torch.bfloat16)
                    for _ in range(layers if name != "lm_head" else 1)]
             for name, s in shapes.items()}
        act = {name: torch.randn((1, k), generator=gen, device="cuda").to(torch.bfloat16)
               for name, (n, k) in shapes.items()}
        out = {name: torch.empty((1, n // 2 if name == "gate_up" else n), device="cuda",
                                 dtype=torch.bfloat16) for name, (n, k) in shapes.items()}

        def nbytes(t):
            return t.numel() * 2

        variants = {   # layer i -> the ranges prefetched before its attention (None: no kernel)
            "none": lambda i: None,
            "empty": lambda i: [],
            "o": lambda i: [(W["o"][i], nbytes(W["o"][i]))],
            "o+gu8": lambda i: [(W["o"][i], nbytes(W["o"][i])),
                                (W["gate_up"][i], min(8 * MB, nbytes(W["gate_up"][i])))],
            "o+gu20": lambda i: [(W["o"][i], nbytes(W["o"][i])),
                                 (W["gate_up"][i], min(20 * MB, nbytes(W["gate_up"][i])))],
            "layer": lambda i: [(W["o"][i], nbytes(W["o"][i])),
                                (W["gate_up"][i], nbytes(W["gate_up"][i])),
                                (W["down"][i], nbytes(W["down"][i]))]
            + ([(W["qkv"][i + 1], nbytes(W["qkv"][i + 1]))] if i + 1 < layers else []),
        }
        if model == "qwen3":
            del variants["layer"]
        else:
            del variants["o+gu8"], variants["o+gu20"]
        print(f"\n== {model}: {layers} layers, weights "
              f"{sum(nbytes(w) for ws in W.values() for w in ws) / 1e9:.2f} GB; µs a step",
              flush=True)
        for att in (0, 4, 8):
            row = f"  ATT {att:2d} µs NORM 1 µs:"
            base = None
            for name, ranges in variants.items():
                def step(ranges=ranges, att=att):
                    for i in range(layers):
                        gemv(act["qkv"], W["qkv"][i], out["qkv"])
                        r = ranges(i)
                        if r is not None:
                            prefetch(r)
                        if att:
                            wait(att)
                        gemv(act["o"], W["o"][i], out["o"])
                        wait(1)
                        gemv(act["gate_up"], W["gate_up"][i], out["gate_up"], silu=True)
                        gemv(act["down"], W["down"][i], out["down"])
                        wait(1)
                    gemv(act["lm_head"], W["lm_head"][0], out["lm_head"])
                us = bt.graph_us(step, reps=15)
                base = us if base is None else base
                row += f"  {name} {us:8.1f} ({us - base:+6.1f})"
            print(row, flush=True)


if __name__ == "__main__":
    main()
