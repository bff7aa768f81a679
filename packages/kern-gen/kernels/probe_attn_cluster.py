"""Probe (issue 16): the cluster-merged decode attention (``attn_decode_cluster.cu``, ABI.md
3a″) against the shipped two-launch pair and torch SDPA, at the thread counts of
:data:`VARIANTS`.

Session 21 wrote the kernel here as a source string; session 22 ran it (H100, docs/device-logs
2026-12-05-s22/c1.log: correct at contexts 1-4096, 5.06 vs 7.36 µs for 9q/3kv d64 and 6.55 vs
7.86 for 32q/8kv d128 at context 144, slower than the pair from ~1-4k keys on) and moved it to
``attn_decode_cluster.cu``, which this probe now compiles with each variant's ``-D`` flags.

What it prints: per variant the largest error against a float32 reference (identity and
permuted page tables), then µs per call (graph-replayed, no PDL, 8 layers' caches rotated) for
each variant, the pair at the generator's splits and torch SDPA, at contexts 144 to 4096.
From the repository root:

    python3 packages/kern-gen/kernels/build.py /tmp/own
    KERN_KERNELS_CUBINS=/tmp/own python3 packages/kern-gen/kernels/probe_attn_cluster.py
"""
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CLUSTER = 8
NVCC = ["-cubin", "-arch=sm_90", "-O3", "-std=c++17", "-Xptxas=-O3"]


VARIANTS = {"8 splits (built)": [], "4 splits": ["-DKERN_CLUSTER_SPLITS=4"],
            "2 splits": ["-DKERN_CLUSTER_SPLITS=2"]}
"""Builds compared (name -> nvcc ``-D`` flags): the shipped one (256 threads, a cluster of 8
key splits) and clusters of 4 and 2 (session 27: fewer blocks to merge and one cluster
barrier among fewer, against more keys a block, for the short contexts where the decode
attention costs ~6 µs a layer).  Session 22's c2 compared 128 threads a block
(``-DKERN_CLUSTER_THREADS_D64=128 -DKERN_CLUSTER_THREADS_D128=128``), before the
folded-rope symbols, whose norm variant needs 6 warps, made 128 unbuildable."""
SPLITS = {name: int(flags[0].split("=")[1]) if flags else CLUSTER
          for name, flags in VARIANTS.items()}
"""Grid y (= the cluster's blocks) of each variant."""


def build(defines: list[str], nvcc: str = "nvcc") -> Path:
    """Compile ``attn_decode_cluster.cu`` with ``defines`` to a cubin in a temporary folder."""
    d = Path(tempfile.mkdtemp(prefix="kern-probe-cluster-"))
    (d / "k.cu").write_text((HERE / "attn_decode_cluster.cu").read_text())
    for h in HERE.glob("*.cuh"):                  # the headers it includes
        (d / h.name).write_text(h.read_text())
    subprocess.run([nvcc, *NVCC, *defines, "k.cu", "-o", "k.cubin"], cwd=d, check=True)
    return d / "k.cubin"


def main() -> None:
    import cupy
    import torch

    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE / "tests"))
    import _own_kernels_gpu as ok   # noqa: E402
    import bench                    # noqa: E402  (timing, paged layers, SDPA, split rule)

    k = ok.Kernels(Path(os.environ["KERN_KERNELS_CUBINS"]))
    mods = {name: cupy.RawModule(path=str(build(flags))) for name, flags in VARIANTS.items()}
    print(torch.cuda.get_device_name(0), flush=True)

    def cluster(name, q, qs, kc, vc, lens, table, out, n_q, n_kv, tokens):
        d = kc.shape[-1]
        f = mods[name].get_function(f"kern_attn_decode_cluster_bf16_d{d}")
        threads = 128 if name.startswith("128") else 256
        p = ok.ptr
        f((n_kv, SPLITS[name], tokens), (threads, 1, 1),
          (p(q), p(kc), p(vc), p(lens), p(table), p(out), np.int32(qs), np.int64(kc.stride(0)),
           np.int64(kc.stride(1)), np.int64(vc.stride(0)), np.int64(vc.stride(1)),
           np.int32(n_q), np.int32(n_kv), np.float32(1 / math.sqrt(d)), np.int32(table.stride(0))))

    g = torch.Generator(device="cuda").manual_seed(5)
    print("\n== correctness: max |cluster - float32 ref| (bf16 out)")
    for n_q, n_kv, d in ((9, 3, 64), (32, 8, 128)):
        for ctx in (1, 17, 144, 1000, 4096):
            for permuted in (False, True):
                kc, vc, table = bench.paged_layer(n_kv, d, [ctx], permuted, g)
                _, q, qs = ok.make_q(torch, 1, n_q, n_kv, d, g, "cuda")
                lens = torch.full((1,), ctx, dtype=torch.int32, device="cuda")
                # float32 reference over the row's keys in table order
                keys = torch.cat([torch.arange(16, device="cuda") + 16 * int(pg)
                                  for pg in table[0, :ok.pages_for(ctx)].tolist()])[:ctx]
                kf, vf = kc[keys].float(), vc[keys].float()           # [ctx, n_kv, d]
                qf = q.float().reshape(n_q, d)
                kk = kf.repeat_interleave(n_q // n_kv, dim=1)         # [ctx, n_q, d]
                vv = vf.repeat_interleave(n_q // n_kv, dim=1)
                w = torch.softmax(torch.einsum("hd,khd->hk", qf, kk) / math.sqrt(d), dim=-1)
                ref = torch.einsum("hk,khd->hd", w, vv)
                errs = []
                for name in VARIANTS:
                    out = torch.full((1, n_q, d), float("nan"), dtype=torch.bfloat16,
                                     device="cuda")
                    cluster(name, q, qs, kc, vc, lens, table, out, n_q, n_kv, 1)
                    torch.cuda.synchronize()
                    errs.append(f"{name}: {(out[0].float() - ref).abs().max().item():.2e}")
                print(f"  {n_q}q/{n_kv}kv d{d} ctx {ctx:5d} "
                      f"{'permuted' if permuted else 'identity'}: {'  '.join(errs)}", flush=True)

    print("\n== µs per call (graph-replayed, no PDL), 8 layers rotated: "
          f"{' | '.join(VARIANTS)} | two launches (generator's splits) | torch SDPA")
    for n_q, n_kv, d in ((9, 3, 64), (32, 8, 128)):
        S, s_min = bench.GEN_SPLITS[n_kv]
        for ctx in (144, 512, 1024, 2048, 4096, 8192, 16384):
            _, q, qs = ok.make_q(torch, 1, n_q, n_kv, d, g, "cuda")
            lens = torch.full((1,), ctx, dtype=torch.int32, device="cuda")
            out = torch.empty((1, n_q, d), dtype=torch.bfloat16, device="cuda")
            pools = [bench.paged_layer(n_kv, d, [ctx], False, g) for _ in range(8)]
            pm, pa, _ = bench.decode_scratch(1, n_q, n_kv, S, d)
            cols = [bench.time_cupy([(lambda c=c, name=name: cluster(
                name, q, qs, c[0], c[1], lens, c[2], out, n_q, n_kv, 1)) for c in pools])
                for name in VARIANTS]
            cols.append(bench.time_cupy([(lambda c=c: k.attn_decode_two_step(
                q, qs, c[0], c[1], lens, c[2], pm, pa, out, n_q, n_kv, S, 1 / math.sqrt(d), 1,
                s_min=s_min)) for c in pools]))
            sd = bench.sdpa_decode_us(n_q, n_kv, d, 1, ctx, 8, "decode")
            print(f"  {n_q}q/{n_kv}kv d{d} ctx {ctx:5d}: "
                  f"{' | '.join(f'{c:7.2f}' for c in cols)} | "
                  f"{sd if sd is None else round(sd, 2)}", flush=True)
            del pools
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
