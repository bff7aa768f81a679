"""Issue 16 lever probe: the decode MLP as one persistent launch (levers/mlp_fused.cu: the SiLU
GEMV, a grid-wide barrier, the down GEMV) against the two shipped launches (gemv.cu's
kern_gemv_silu_bf16 then kern_gemv_bf16), Qwen3-4B shapes at m = 1, in one process.

    python3 packages/kern-gen/kernels/build.py /tmp/own      # gemv.cubin
    python3 packages/kern-gen/kernels/probe_mlp_fused.py /tmp/own

1. Bits: for each warp count NW the fused kernel's h and c against the two kernels launched
   with the same NW (each output element is the same dot product in the same order, so they
   must be equal), once eagerly and after a graph of 36 layers with PDL replayed 50 times
   (the barrier reused 1,800 times); the barrier's count must be back at zero.
2. µs: the chain of 36 MLPs (distinct weights) — the shipped pair (gate_up 8 warps, down 16,
   kern-gen's picks), the pair at NW, the fused kernel at NW with G = the blocks the GPU holds
   at once (the occupancy API) — then the step's GEMMs (36 x qkv, o, MLP, then lm_head), the
   shipped pair against the fastest fused NW, twice interleaved.  PDL launches in CUDA
   graphs, medians of replays.
"""
import ctypes
import sys
from pathlib import Path

import cupy
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "tests"))
import _own_kernels_gpu as okg  # noqa: E402
from bench_gemv_tma import graph_us, launch  # noqa: E402

LAYERS, D, FF, QKV, Q, VOCAB = 36, 2560, 9728, 6144, 4096, 151936
WARPS = (4, 8, 16)


def build(out: Path) -> Path:
    """levers/mlp_fused.cu by build.py's build_one (it is outside build.py's glob on purpose:
    a lever, not a kernel of the product); its ptxas report on stderr."""
    b = okg._build_module()
    return b.build_one(b.find_nvcc(), HERE / "levers" / "mlp_fused.cu", out, verbose=True)


def resident_blocks(fn, threads: int) -> int:
    n = ctypes.c_int()
    rc = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveBlocksPerMultiprocessor(
        ctypes.byref(n), ctypes.c_void_p(getattr(fn, "ptr", None) or fn.kernel.ptr), threads, ctypes.c_size_t(0))
    assert rc == 0, f"cuOccupancyMaxActiveBlocksPerMultiprocessor: CUresult {rc}"
    return n.value * torch.cuda.get_device_properties(0).multi_processor_count


class Kernels:
    def __init__(self, own: Path):
        g = cupy.RawModule(path=str(own / "gemv.cubin"))
        f = cupy.RawModule(path=str(build(own)))
        self.gemv, self.silu = g.get_function("kern_gemv_bf16"), g.get_function("kern_gemv_silu_bf16")
        self.fused = f.get_function("kern_mlp_fused_bf16")
        self.bar = torch.zeros(2, dtype=torch.int32, device="cuda")
        self.grid = {nw: resident_blocks(self.fused, 32 * nw) for nw in WARPS}
        print("fused: blocks held at once by NW:", self.grid, flush=True)

    def gemv_(self, a, w, c, nw):
        n, k = w.shape
        launch(self.gemv, (-(-n // 16), 1, 1), (32 * nw, 1, 1), 0,
               [a.data_ptr(), w.data_ptr(), c.data_ptr(), a.shape[0], n, k])

    def pair(self, a, wgu, wd, h, c, nw_gu, nw_d):
        launch(self.silu, (-(-FF // 16), 1, 1), (32 * nw_gu, 1, 1), 0,
               [a.data_ptr(), wgu.data_ptr(), h.data_ptr(), a.shape[0], FF, D])
        self.gemv_(h, wd, c, nw_d)

    def fused_(self, a, wgu, wd, h, c, nw):
        launch(self.fused, (self.grid[nw], 1, 1), (32 * nw, 1, 1), 0,
               [a.data_ptr(), wgu.data_ptr(), wd.data_ptr(), h.data_ptr(), c.data_ptr(),
                self.bar.data_ptr(), a.shape[0], FF, D])


def main():
    kn = Kernels(Path(sys.argv[1]))
    gen = torch.Generator(device="cuda").manual_seed(0)
    rnd = lambda *s: (torch.randn(s, generator=gen, device="cuda") * 0.02).to(torch.bfloat16)  # noqa: E731
    Wgu = [rnd(2 * FF, D) for _ in range(LAYERS)]
    Wd = [rnd(D, FF) for _ in range(LAYERS)]
    Wqkv = [rnd(QKV, D) for _ in range(LAYERS)]
    Wo = [rnd(D, Q) for _ in range(LAYERS)]
    Wlm = rnd(VOCAB, D)
    x = torch.randn((1, D), generator=gen, device="cuda").to(torch.bfloat16)
    att = torch.randn((1, Q), generator=gen, device="cuda").to(torch.bfloat16)
    h, c, h2, c2 = (torch.empty((1, n), dtype=torch.bfloat16, device="cuda")
                    for n in (FF, D, FF, D))
    qkv, logits = (torch.empty((1, n), dtype=torch.bfloat16, device="cuda") for n in (QKV, VOCAB))

    print("== bits: fused vs the pair at the same NW (h, c)", flush=True)
    ok = True
    for nw in WARPS:
        kn.pair(x, Wgu[0], Wd[0], h2, c2, nw, nw)
        kn.fused_(x, Wgu[0], Wd[0], h, c, nw)
        torch.cuda.synchronize()
        eager = torch.equal(h, h2) and torch.equal(c, c2)
        kn.pair(x, Wgu[-1], Wd[-1], h2, c2, nw, nw)
        torch.cuda.synchronize()
        ref_h, ref_c = h2.clone(), c2.clone()

        def chain(nw=nw):
            for i in range(LAYERS):
                kn.fused_(x, Wgu[i], Wd[i], h, c, nw)
        us = graph_us(chain, reps=50)            # 51 replays + the capture's eager run
        replayed = torch.equal(h, ref_h) and torch.equal(c, ref_c)
        count = int(kn.bar[0].item())
        good = eager and replayed and count == 0
        ok &= good
        print(f"  NW {nw:2d} (G {kn.grid[nw]}): eager {'equal' if eager else 'DIFFER'}; "
              f"after 50 graph replays {'equal' if replayed else 'DIFFER'}; barrier count "
              f"{count}; launches {int(kn.bar[1].item()) & 0xffffffff}; {us / LAYERS:.2f} µs "
              f"an MLP", flush=True)

    print("\n== µs an MLP, chain of 36 distinct weights, PDL, graph", flush=True)
    ship = (okg.gemv_warps(FF, D), okg.gemv_warps(D, FF))
    rows = {f"pair {ship[0]}/{ship[1]} warps (shipped)":
            lambda i: kn.pair(x, Wgu[i], Wd[i], h, c, *ship)}
    for nw in WARPS:
        rows[f"pair {nw}/{nw} warps"] = lambda i, nw=nw: kn.pair(x, Wgu[i], Wd[i], h, c, nw, nw)
        rows[f"fused {nw} warps"] = lambda i, nw=nw: kn.fused_(x, Wgu[i], Wd[i], h, c, nw)
    times = {}
    for label, mlp in rows.items():
        times[label] = graph_us(lambda mlp=mlp: [mlp(i) for i in range(LAYERS)]) / LAYERS
        print(f"  {label:28s} {times[label]:8.2f}", flush=True)
    nw_best = min(WARPS, key=lambda nw: times[f"fused {nw} warps"])

    print(f"\n== the step's GEMMs (µs), PDL, graph: shipped pair vs fused {nw_best} warps",
          flush=True)
    nq, no, nl = (okg.gemv_warps(n, k) for n, k in ((QKV, D), (D, Q), (VOCAB, D)))

    def step(fused):
        for i in range(LAYERS):
            kn.gemv_(x, Wqkv[i], qkv, nq)
            kn.gemv_(att, Wo[i], c, no)
            if fused:
                kn.fused_(c, Wgu[i], Wd[i], h, x, nw_best)
            else:
                kn.pair(c, Wgu[i], Wd[i], h, x, *ship)
        kn.gemv_(x, Wlm, logits, nl)
    for rep in range(2):
        a, b = graph_us(lambda: step(False), reps=15), graph_us(lambda: step(True), reps=15)
        print(f"  rep {rep}: shipped {a:9.1f}  fused {b:9.1f}  ({b - a:+.1f})", flush=True)
    print("bits:", "ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
