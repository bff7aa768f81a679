"""The bulk-copy GEMV (gemv_tma.cu, ABI.md 4d) in configurations against the shipped GEMV
(gemv.cubin) and cuBLAS on the Qwen3-4B decode shapes: accuracy vs float64, µs per GEMV in a
chain of 36 distinct weights (8 GB, so every launch reads HBM), and a whole decode step's
GEMMs (36 x qkv, o, gate_up + SiLU, down, then lm_head); kern's kernels launched with PDL
(cuLaunchKernelEx) inside CUDA graphs, medians of graph replays.  From the repository root on
the GPU machine:

    V="1024_2_4 512_4_4 512_4_4_99"          # KC_STAGES_NWARPS[_BLOCKS-A-SM]
    for v in $(for x in $V; do echo $x | cut -d_ -f1-3; done | sort -u); do
      IFS=_ read kc st nw <<< "$v"
      nvcc -cubin -arch=sm_90 -O3 -std=c++17 -DKC=$kc -DSTAGES=$st -DNWARPS=$nw \
        packages/kern-gen/kernels/gemv_tma.cu -o /tmp/tma/gemv_tma_$v.cubin
    done
    python3 packages/kern-gen/kernels/bench_gemv_tma.py examples/qwen3-4b/kernels /tmp/tma $V

The 4th field caps the persistent grid at that many blocks a SM (99: one block a tile);
without it the cap is what shared memory allows (at most 4).  Session 15's runs:
docs/device-logs/2026-12-04-s15/c6-c8 (docs/measurements.md).
"""
import statistics
import sys
from pathlib import Path

import cupy
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))
import _own_kernels_gpu as okg  # noqa: E402

LAYERS = 36
SHAPES = {"qkv": (6144, 2560), "o": (2560, 4096), "gate_up": (19456, 2560),
          "down": (2560, 9728), "lm_head": (151936, 2560)}

_pdl = okg.pdl_launcher()


def launch(fn, grid, block, smem, args):
    """``fn`` on torch's current stream with PDL (cuLaunchKernelEx); ``args`` python ints
    (device pointers: the ones above 2^31)."""
    vals = [np.uint64(a) if a > 2**31 else np.int32(a) for a in args]
    _pdl(fn, grid, block, smem, torch.cuda.current_stream().cuda_stream, vals)


class Gemv:
    """The shipped GEMV: kern_gemv_bf16 / kern_gemv_silu_bf16, the generator's warps."""
    name = "gemv"

    def __init__(self, d):
        mod = cupy.RawModule(path=str(Path(d) / "gemv.cubin"))
        self.f, self.fs = mod.get_function("kern_gemv_bf16"), mod.get_function("kern_gemv_silu_bf16")

    def __call__(self, a, w, c, silu=False):
        m, (n, k) = a.shape[0], w.shape
        if silu:
            nw = okg.gemv_warps(n, k)
            launch(self.fs, (-(-(n // 2) // 16), -(-m // 8), 1), (32 * nw, 1, 1), 0,
                   [a.data_ptr(), w.data_ptr(), c.data_ptr(), m, n // 2, k])
        else:
            nw = okg.gemv_warps(n, k)
            launch(self.f, (-(-n // 16), -(-m // 8), 1), (32 * nw, 1, 1), 0,
                   [a.data_ptr(), w.data_ptr(), c.data_ptr(), m, n, k])


class Tma:
    def __init__(self, d, variant):
        self.name = f"tma {variant}"
        kc, st, nw, *bps = (int(x) for x in variant.split("_"))
        self.nw = nw
        mod = cupy.RawModule(path=str(Path(d) / f"gemv_tma_{'_'.join(variant.split('_')[:3])}.cubin"))
        self.f, self.fs = mod.get_function("kern_gemv_tma_bf16"), mod.get_function("kern_gemv_tma_silu_bf16")
        out = cupy.zeros(2, dtype=cupy.int32)
        mod.get_function("kern_gemv_tma_smem")((1,), (32,), (out,))
        self.smem = [int(x) for x in out.get()]
        for f, s in ((self.f, self.smem[0]), (self.fs, self.smem[1])):
            f.max_dynamic_shared_size_bytes = s
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        # resident blocks a SM: the shared memory (228 KB, 1 KB reserved a block, the static
        # 2-4 KB) and at most 4 (registers), or the variant's 4th field
        self.grid = [sms * (bps[0] if bps else min(4, 233472 // (s + 1024 + 4096)))
                     for s in self.smem]
        print(self.name, "smem", self.smem, "grid cap", self.grid, flush=True)

    def __call__(self, a, w, c, silu=False):
        m, (n, k) = a.shape[0], w.shape
        blk = (32 * (self.nw + 1), 1, 1)
        if silu:
            launch(self.fs, (min(self.grid[1], -(-(n // 2) // 16)), -(-m // 8), 1), blk, self.smem[1],
                   [a.data_ptr(), w.data_ptr(), c.data_ptr(), m, n // 2, k])
        else:
            launch(self.f, (min(self.grid[0], -(-n // 16)), -(-m // 8), 1), blk, self.smem[0],
                   [a.data_ptr(), w.data_ptr(), c.data_ptr(), m, n, k])


class Cublas:
    name = "cublas"

    def __call__(self, a, w, c, silu=False):
        if silu:
            y = F.linear(a, w)
            n = w.shape[0] // 2
            c.copy_(F.silu(y[:, :n]) * y[:, n:])
        else:
            torch.matmul(a, w.t(), out=c)


def capture(fn):
    """``fn``'s launches as a CUDA graph (run once eagerly first, on a side stream)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        fn()
    return g


def graph_us(fn, reps=25):
    g = capture(fn)
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e3)
    return statistics.median(ts)


def main():
    cubins, tdir, variants = sys.argv[1], sys.argv[2], sys.argv[3:]
    impls = [Gemv(cubins)] + [Tma(tdir, v) for v in variants] + [Cublas()]
    gen = torch.Generator(device="cuda").manual_seed(0)
    W = {name: [(torch.randn(s, generator=gen, device="cuda") * 0.02).to(torch.bfloat16)
                for _ in range(LAYERS if name != "lm_head" else 1)] for name, s in SHAPES.items()}
    print("weights GB", sum(w.numel() * 2 for ws in W.values() for w in ws) / 1e9, flush=True)
    for m in (1, 8):
        acts = {name: (torch.randn((m, k), generator=gen, device="cuda")).to(torch.bfloat16)
                for name, (n, k) in SHAPES.items()}
        outs = {name: torch.empty((m, n // 2 if name == "gate_up" else n), dtype=torch.bfloat16,
                                  device="cuda") for name, (n, k) in SHAPES.items()}
        # accuracy: each impl vs the float64 reference, layer 0 (relative Frobenius, max abs)
        print(f"\n== m = {m}: accuracy vs float64 (rel err / max abs)")
        for name in SHAPES:
            w, a = W[name][0], acts[name]
            ref = a.double() @ w.double().t()
            if name == "gate_up":
                n = w.shape[0] // 2
                ref = F.silu(ref[:, :n].to(torch.bfloat16).double()) * ref[:, n:].to(torch.bfloat16).double()
            line = f"  {name:8s}"
            for im in impls:
                c = outs[name]
                c.fill_(float("nan"))
                im(a, w, c, silu=name == "gate_up")
                torch.cuda.synchronize()
                err = (c.double() - ref)
                line += (f" | {im.name}: {err.norm().item() / ref.norm().item():.2e} "
                         f"{err.abs().max().item():.2e}")
            print(line, flush=True)
        print(f"== m = {m}: µs per GEMV, chain of {LAYERS} distinct weights, PDL, graph")
        hdr = f"  {'shape':8s}" + "".join(f"{im.name:>16s}" for im in impls)
        print(hdr)
        for name in SHAPES:
            ws = W[name]
            row = f"  {name:8s}"
            for im in impls:
                def chain(ws=ws, im=im, name=name):
                    for w in ws:
                        im(acts[name], w, outs[name], silu=name == "gate_up")
                row += f"{graph_us(chain) / len(ws):16.2f}"
            print(row, flush=True)
        # a decode step's GEMMs: 36 x (qkv, o, gate_up+SiLU, down) + lm_head
        x, qkv, att = acts["qkv"], outs["qkv"], acts["o"]
        o, h, dn = outs["o"], outs["gate_up"], outs["down"]
        row = f"  {'step':8s}"
        for im in impls:
            def step(im=im):
                for i in range(LAYERS):
                    im(x, W["qkv"][i], qkv)
                    im(att, W["o"][i], o)
                    im(o, W["gate_up"][i], h, silu=True)
                    im(h, W["down"][i], x)
                im(x, W["lm_head"][0], outs["lm_head"])
            row += f"{graph_us(step, reps=15):16.1f}"
        print(row + "   (µs, the whole step's GEMMs)", flush=True)


if __name__ == "__main__":
    main()
