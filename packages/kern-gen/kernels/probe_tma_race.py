"""Stress of the bulk-copy GEMV (gemv_tma.cu, ABI.md 4d): many launches of one shape at the
generator's grid, each against a float32 reference (gemv_gpu's bound) and bit for bit against
the first good output.  Session 28 found with it that the consumers released a stage without
``fence.proxy.async`` (the Qwen3 lm_head at m = 8: 174 of 40,000 launches with wrong columns on
the H200, 9 on the H100; none with the fence).

    python3 packages/kern-gen/kernels/probe_tma_race.py CUBIN_DIR [--runs 3000]

CUBIN_DIR holds gemv_tma.cubin (build.py's output); prints one line per case.
"""
import argparse
import time
from pathlib import Path

import cupy
import numpy as np
import torch

SMEM = 67616            # kern_gemv_tma_bf16's dynamic shared memory (kern_gen.llama.gemm)
CASES = [  # (n, k, m, grid x)
    (151936, 2560, 8, 396), (151936, 2560, 1, 396), (19456, 2560, 8, 396),
    (19456, 2560, 8, 132), (6144, 2560, 7, 396),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cubins", type=Path)
    ap.add_argument("--runs", type=int, default=3000)
    args = ap.parse_args()
    fn = cupy.RawModule(path=str(args.cubins / "gemv_tma.cubin")).get_function(
        "kern_gemv_tma_bf16")
    fn.max_dynamic_shared_size_bytes = SMEM
    torch.backends.cuda.matmul.allow_tf32 = False
    for n, k, m, gx in CASES:
        g = torch.Generator(device="cuda").manual_seed(n + m)
        a = torch.randn((m, k), generator=g, device="cuda").to(torch.bfloat16)
        w = (torch.randn((n, k), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
        ref = a.float() @ w.float().T
        bound = ref.abs() * 2.0 ** -8 + ref.abs().max() * 2.0 ** -12
        out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        gold, off, differ, worst, t0 = None, 0, 0, 0.0, time.time()
        for _ in range(args.runs):
            out.fill_(float("nan"))
            fn((gx, -(-m // 8), 1), (160, 1, 1),
               (np.uint64(a.data_ptr()), np.uint64(w.data_ptr()), np.uint64(out.data_ptr()),
                np.int32(m), np.int32(n), np.int32(k)), shared_mem=SMEM)
            err = (out.float() - ref).abs()
            bad = bool((err > bound).any())
            if gold is None and not bad:
                gold = out.clone()
            off += bad
            differ += gold is not None and not torch.equal(out, gold)
            worst = max(worst, float(err.max()))
        print(f"n {n} k {k} m {m} grid {gx}: {args.runs} launches, {off} out of tolerance, "
              f"{differ} with other bits than the first good one, max error {worst:.3g} "
              f"({time.time() - t0:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
