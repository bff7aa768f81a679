"""Issue 16's Triton GEMV probe, reproduced: a Triton GEMV (bf16 in, f32 accumulate) that
loads its first weight tile, then waits on the grid dependency (PDL), against the shipped
GEMV (gemv.cu) and cuBLAS on the Qwen3-4B decode shapes at m = 1, in the same process.

The issue reports (H200, µs): qkv 8.40, o 6.72 (split-K 2), gate_up 23.63, down 15.16,
lm_head 169.5, a step's GEMMs 2.11 ms; session 27's kbench of gemv.cu on an H200 gave qkv
9.30, o 7.43, gate_up (+ SiLU) 26.33, down 14.35, lm_head 182.6, a step 2.226 ms.  This probe
says whether that gap is real for a chain of distinct weights (every launch reads HBM), and
which tile shapes give it.  A probe, not a kernel of the product: nothing here is wired into
a manifest.

    python3 packages/kern-gen/kernels/build.py /tmp/own   # gemv.cubin (device_gemv_levers.sh does it)
    python3 packages/kern-gen/kernels/probe_gemv_triton.py /tmp/own [--only 16x512x4x3,...]

Prints, per shape: µs per GEMV (chain of 36 distinct weights, PDL launches in one CUDA
graph, median of replays) for each Triton configuration BNxBKxWARPSxSTAGES, gemv.cu and
cuBLAS; each kernel's relative error against float64 on layer 0; where the wait sits in the
best configuration's PTX; then the step's GEMMs (36 x qkv, o, gate_up + SiLU, down, then
lm_head) with gemv.cu, with the best Triton configuration per shape, with the faster of the
two per shape (by the table), and with gemv.cu but the lm_head (then gemv.cu again: the
rows' noise).

Session 35 (H200, docs/measurements.md): the issue's figures were not reproduced; the best
configuration (16x512, 4 warps, 3 cp.async stages) ties gemv.cu on gate_up, loses 0.3-0.7 µs
on qkv / o / down and wins 8.5 µs on the lm_head; the step with it everywhere 2304.5 vs
2209.9 µs.  Session 36 (H200): the step with only the lm_head swapped, 2251.5 / 2256.6 vs
2233.7 / 2236.9 µs: slower too.
"""
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))
from bench_gemv_tma import LAYERS, SHAPES, Cublas, Gemv, graph_us  # noqa: E402

# (rows a program, K a loop step, warps); each with 1 and 3 stages (3: the loop's weight tiles
# arrive by cp.async into shared memory two steps ahead)
TILES = [(16, 256, 4), (16, 512, 4), (16, 512, 8), (32, 256, 4), (32, 256, 8), (32, 512, 4),
         (32, 512, 8), (64, 128, 4), (64, 256, 8)]
STAGES = (1, 3)


@triton.jit
def gemv_tr(a_ptr, w_ptr, c_ptr, N, K: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
            SILU: tl.constexpr, GDC: tl.constexpr, NS: tl.constexpr):
    """c[0, r] = sum_k a[0, k] w[r, k] for r < N (SILU: silu(w[r] . a) * (w[N + r] . a), w has
    2N rows); a (1, K), w (rows, K) row-major bf16, c bf16.  The first weight tile is loaded
    before the grid-dependency wait (weights are never written by a predecessor); a and c only
    after it."""
    pid = tl.program_id(0)
    rows = pid * BN + tl.arange(0, BN)
    rmask = rows < N
    cols = tl.arange(0, BK)
    wp = w_ptr + rows.to(tl.int64)[:, None] * K + cols[None, :]
    up = wp + N * K
    w = tl.load(wp, mask=rmask[:, None], other=0.0)
    if SILU:
        u = tl.load(up, mask=rmask[:, None], other=0.0)
    if GDC:
        tl.extra.cuda.gdc_wait()
    a = tl.load(a_ptr + cols).to(tl.float32)[None, :]
    acc = w.to(tl.float32) * a
    if SILU:
        accu = u.to(tl.float32) * a
    for k0 in tl.range(BK, K, BK, num_stages=NS):     # NS > 1: cp.async stages in shared
        a = tl.load(a_ptr + k0 + cols).to(tl.float32)[None, :]
        w = tl.load(wp + k0, mask=rmask[:, None], other=0.0)
        acc += w.to(tl.float32) * a
        if SILU:
            u = tl.load(up + k0, mask=rmask[:, None], other=0.0)
            accu += u.to(tl.float32) * a
    y = tl.sum(acc, axis=1)
    if SILU:
        y = y / (1.0 + tl.exp(-y)) * tl.sum(accu, axis=1)
    if GDC:
        tl.extra.cuda.gdc_launch_dependents()
    tl.store(c_ptr + rows, y.to(tl.bfloat16), mask=rmask)


class Tr:
    def __init__(self, bn, bk, nw, ns):
        self.cfg, self.name = (bn, bk, nw, ns), f"{bn}x{bk}x{nw}x{ns}"
        self.compiled = {}

    def __call__(self, a, w, c, silu=False):
        bn, bk, nw, ns = self.cfg
        n, k = w.shape
        if k % bk:
            raise ValueError(f"K {k} is not a multiple of BK {bk}")
        n = n // 2 if silu else n
        ck = gemv_tr[(triton.cdiv(n, bn),)](a, w, c, n, K=k, BN=bn, BK=bk, SILU=silu, GDC=True,
                                            NS=ns, num_warps=nw, launch_pdl=True)
        self.compiled[(k, silu)] = ck


def wait_position(ck):
    """Global loads before / after griddepcontrol.wait in the kernel's PTX."""
    ptx = ck.asm["ptx"]
    i = ptx.find("griddepcontrol.wait")
    return ptx[:i].count("ld.global"), ptx[i:].count("ld.global")


def rel_err(impl, w, a, c, silu):
    impl(a, w, c, silu=silu)
    torch.cuda.synchronize()
    y = a.double() @ w.double().t()
    if silu:
        h = y.shape[1] // 2
        y = torch.nn.functional.silu(y[:, :h]) * y[:, h:]
    return ((c.double() - y).norm() / y.norm()).item()


def main():
    gemv, cub = Gemv(sys.argv[1]), Cublas()
    trs = [Tr(*t, ns) for t in TILES for ns in STAGES]
    if "--only" in sys.argv:      # --only 16x512x4x3,16x256x4x3: those configurations only
        keep = sys.argv[sys.argv.index("--only") + 1].split(",")
        trs = [t for t in trs if t.name in keep]
    gen = torch.Generator(device="cuda").manual_seed(0)
    W = {name: [(torch.randn(s, generator=gen, device="cuda") * 0.02).to(torch.bfloat16)
                for _ in range(LAYERS if name != "lm_head" else 1)] for name, s in SHAPES.items()}
    acts = {name: torch.randn((1, k), generator=gen, device="cuda").to(torch.bfloat16)
            for name, (n, k) in SHAPES.items()}
    outs = {name: torch.empty((1, n // 2 if name == "gate_up" else n), dtype=torch.bfloat16,
                              device="cuda") for name, (n, k) in SHAPES.items()}
    print(f"== qwen3, m = 1: µs per GEMV, chain of {LAYERS} distinct weights, PDL, graph; "
          f"Triton BNxBKxWARPSxSTAGES", flush=True)
    best, fastest = {}, {}
    for name in SHAPES:
        silu = name == "gate_up"
        times = {}
        for impl in [gemv, cub] + trs:
            def chain(impl=impl, name=name, silu=silu):
                for w in W[name]:
                    impl(acts[name], w, outs[name], silu=silu)
            try:
                times[impl] = graph_us(chain) / len(W[name])
            except Exception as e:      # a configuration Triton cannot build: say so, go on
                print(f"  {name} {impl.name}: {type(e).__name__}: {str(e)[:120]}", flush=True)
        ranked = sorted((t, i.name, i) for i, t in times.items() if i not in (gemv, cub))
        top = ranked[0][2]
        best[name] = top
        fastest[name] = gemv if times[gemv] <= ranked[0][0] else top
        err = {i.name: rel_err(i, W[name][0], acts[name], outs[name], silu)
               for i in (gemv, cub, top)}
        k = SHAPES[name][1]
        print(f"  {name:8s} gemv.cu {times[gemv]:8.2f}  cublas {times[cub]:8.2f}  triton best "
              f"{ranked[0][0]:8.2f} ({ranked[0][1]}; loads before/after the wait "
              f"{wait_position(top.compiled[(k, silu)])})  rel err gemv.cu {err['gemv']:.2e} "
              f"cublas {err['cublas']:.2e} triton {err[top.name]:.2e}", flush=True)
        print("     " + "  ".join(f"{nm} {t:.2f}" for t, nm, _ in ranked[:8]), flush=True)
    x, qkv, att = acts["qkv"], outs["qkv"], acts["o"]
    o, h = outs["o"], outs["gate_up"]
    # the table's chains repeat one shape; a step mixes them, and how a kernel overlaps its
    # neighbours under PDL (trigger point, shared memory held) differs by kind: only the
    # step rows say what a swap would give
    for label, pick in (("gemv.cu", {nm: gemv for nm in SHAPES}), ("triton best", best),
                        ("faster per shape", fastest),
                        ("gemv.cu, triton lm_head", {**{nm: gemv for nm in SHAPES},
                                                     "lm_head": best["lm_head"]}),
                        ("gemv.cu again", {nm: gemv for nm in SHAPES})):
        def step(pick=pick):
            for i in range(LAYERS):
                pick["qkv"](x, W["qkv"][i], qkv)
                pick["o"](att, W["o"][i], o)
                pick["gate_up"](o, W["gate_up"][i], h, silu=True)
                pick["down"](h, W["down"][i], x)
            pick["lm_head"](x, W["lm_head"][0], outs["lm_head"])
        names = " ".join(f"{nm}={pick[nm].name}" for nm in SHAPES)
        print(f"  step GEMMs, {label:17s} {graph_us(step, reps=15):9.1f} µs  ({names})",
              flush=True)


if __name__ == "__main__":
    main()
