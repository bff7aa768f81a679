"""The split-K GEMV (gemv_splitk.cu, ABI.md 4f) against the plain one (gemv.cu) and cuBLAS:
µs per GEMV in a chain of distinct weights (every launch reads HBM), PDL launches in CUDA
graphs, medians of graph replays; then each model's decode-step GEMMs (layers x qkv, o,
gate_up + SiLU, down, then lm_head) with the plain GEMV everywhere against each shape's
fastest configuration from the table above it (same run).  From the repository root on the
GPU machine, after ``python3 packages/kern-gen/kernels/build.py /tmp/own``:

    python3 packages/kern-gen/kernels/bench_gemv_splitk.py /tmp/own [--steps-only]

Configurations: S (splits) in 1 (gemv.cu), 2, 4, 8 and warps a block in 4, 8, 16.
``--steps-only``: only the step rows (gemv.cu and kern-gen's picks), e.g. for a variant build
(``build.py -D NAME=VALUE``) against the default one.
"""
import sys
from pathlib import Path

import cupy
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))
import _own_kernels_gpu as okg  # noqa: E402
from bench_gemv_tma import graph_us, launch  # noqa: E402

MODELS = {
    "qwen3": (36, {"qkv": (6144, 2560), "o": (2560, 4096), "gate_up": (19456, 2560),
                   "down": (2560, 9728), "lm_head": (151936, 2560)}),
    "smollm2": (30, {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576),
                     "down": (576, 1536), "lm_head": (49152, 576)}),
}
CONFIGS = [(s, nw) for s in (1, 2, 4, 8) for nw in (4, 8, 16)]


class Kern:
    def __init__(self, d):
        plain = cupy.RawModule(path=str(Path(d) / "gemv.cubin"))
        sk = cupy.RawModule(path=str(Path(d) / "gemv_splitk.cubin"))
        self.fn = {(1, False): plain.get_function("kern_gemv_bf16"),
                   (1, True): plain.get_function("kern_gemv_silu_bf16")}
        for s in (2, 4, 8):
            self.fn[(s, False)] = sk.get_function(f"kern_gemv_sk{s}_bf16")
            self.fn[(s, True)] = sk.get_function(f"kern_gemv_silu_sk{s}_bf16")

    def __call__(self, cfg, a, w, c, silu=False):
        s, nw = cfg
        m, (rows, k) = a.shape[0], w.shape
        n = rows // 2 if silu else rows
        launch(self.fn[(s, silu)], (-(-n // 16), -(-m // 8), s), (32 * nw, 1, 1), 0,
               [a.data_ptr(), w.data_ptr(), c.data_ptr(), m, n, k])


def main():
    kern = Kern(sys.argv[1])
    steps_only = "--steps-only" in sys.argv[2:]
    gen = torch.Generator(device="cuda").manual_seed(0)
    for model, (layers, shapes) in MODELS.items():
        W = {name: [(torch.randn(s, generator=gen, device="cuda") * 0.02).to(torch.bfloat16)
                    for _ in range(layers if name != "lm_head" else 1)]
             for name, s in shapes.items()}
        for m in (1, 8):             # decode, verify
            table(kern, model, layers, shapes, W, m, gen, steps_only)
        W = None                      # free the model's weights before the next


def table(kern, model, layers, shapes, W, m, gen, steps_only=False):
    """One model's per-shape table at m rows (unless ``steps_only``), then its step GEMMs
    (plain, the best picks of the table, kern-gen's picks)."""
    acts = {name: torch.randn((m, k), generator=gen, device="cuda").to(torch.bfloat16)
            for name, (n, k) in shapes.items()}
    outs = {name: torch.empty((m, n // 2 if name == "gate_up" else n), dtype=torch.bfloat16,
                              device="cuda") for name, (n, k) in shapes.items()}
    print(f"\n== {model}, m = {m}: µs per GEMV, chain of {layers} distinct weights, PDL, "
          f"graph (S x warps; S = 1 is gemv.cu; * the generator's warps today)")
    best = {}
    if not steps_only:
        print(f"  {'shape':8s}" + "".join(f"{f'{s}x{nw}':>9s}" for s, nw in CONFIGS)
              + f"{'cublas':>9s}")
    for name, (n, k) in ({} if steps_only else shapes).items():
        silu = name == "gate_up"
        rule = (1, okg.gemv_warps(n, k))
        row, times = f"  {name:8s}", {}
        for cfg in CONFIGS:
            if cfg[1] * 32 > 32 * -(-k // 32) or (name == "lm_head" and cfg[0] > 1):
                row += f"{'-':>9s}"
                continue
            def chain(cfg=cfg, name=name, silu=silu):
                for w in W[name]:
                    kern(cfg, acts[name], w, outs[name], silu=silu)
            times[cfg] = graph_us(chain) / len(W[name])
            row += f"{times[cfg]:8.2f}" + ("*" if cfg == rule else " ")
        def cub(name=name, silu=silu):
            for w in W[name]:
                if silu:
                    y = torch.nn.functional.linear(acts[name], w)
                    h = y.shape[1] // 2
                    outs[name].copy_(torch.nn.functional.silu(y[:, :h]) * y[:, h:])
                else:
                    torch.matmul(acts[name], w.t(), out=outs[name])
        row += f"{graph_us(cub) / len(W[name]):9.2f}"
        best[name] = min(times, key=times.get)
        print(row + f"   best {best[name][0]}x{best[name][1]}", flush=True)
    x, qkv, att = acts["qkv"], outs["qkv"], acts["o"]
    o, h = outs["o"], outs["gate_up"]
    picks = [("plain (generator's warps)",
              {nm: (1, okg.gemv_warps(*shapes[nm])) for nm in shapes})]
    if best:
        picks.append(("best per shape", best))
    try:        # kern-gen --gemm splitk's picks, where kern_gen is importable (PYTHONPATH)
        from kern_gen.llama.gemm_splitk import splits
        picks.append(("kern-gen --gemm splitk", {
            nm: (splits(n // 2, k, tiles=2) if nm == "gate_up" else splits(n, k),
                 okg.gemv_warps(n, k))
            for nm, (n, k) in shapes.items()}))
    except ImportError:
        pass
    for label, pick in picks:
        def step(pick=pick):
            for i in range(layers):
                kern(pick["qkv"], x, W["qkv"][i], qkv)
                kern(pick["o"], att, W["o"][i], o)
                kern(pick["gate_up"], o, W["gate_up"][i], h, silu=True)
                kern(pick["down"], h, W["down"][i], x)
            kern(pick["lm_head"], x, W["lm_head"][0], outs["lm_head"])
        print(f"  step GEMMs, {label:26s} {graph_us(step, reps=15):9.1f} µs", flush=True)


if __name__ == "__main__":
    main()
