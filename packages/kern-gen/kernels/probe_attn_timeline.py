"""Where the decode attention's time goes in the decode step (issue 16: ``kern-run bench
--ablate`` charges it ~5.7 µs a layer on the H100 at context 144, and which phase costs what
was never measured).  A build with ``-D KERN_ATTN_TIMELINE=1 -D KERN_GEMV_TIMELINE=1``
(attn_decode_cluster.cu, gemv_core.cuh; kern_timeline.cuh) has thread 0 of every block read %globaltimer at the
points attn_decode_cluster.cu lists (and the GEMVs at theirs).  This runs the Qwen3-4B shape's
qkv GEMV (``kern_gemv_et_bf16``) -> cluster rope-norm attention -> o GEMV chain for 36
layers as the decode step launches them (PDL, one CUDA graph, context 144, each layer its
own weights, cache and output), replays it, and prints the medians over the layers of:

- ``launch``: the attention's first block entry after the qkv GEMV's wait returned (median
  block; qkv triggers right after its wait); ``spread``: last entry - first;
- ``wait``: the attention's wait return (median block) after qkv's last tile store;
- ``q ready``: the q/k RMS-norm + rope and the new K/V row in shared memory (median);
- ``pass``: the block's key pass and in-block merge (median);
- ``sync 1``: the first cluster barrier (median; its spread is the slowest block's);
- ``merge``: rank 0's merge through DSMEM and the output store (rank 0 blocks, median);
- ``sync 2``: the second barrier (median); ``exit``: the last block's exit after qkv's last
  store;
- ``o wait``: the o GEMV's wait return (median block) after the attention's last exit; and
  for comparison the same chain without the attention (o right after qkv): o's wait after
  qkv's last store, and the whole step's share (o's last store - qkv's last store) in both.

From the repository root on the GPU machine:

    python3 packages/kern-gen/kernels/build.py /tmp/own_tl -D KERN_GEMV_TIMELINE=1 \\
        -D KERN_ATTN_TIMELINE=1
    python3 packages/kern-gen/kernels/probe_attn_timeline.py /tmp/own_tl

The instrumented kernels use a few more registers than the build's; read the rows as the
shape of the time, not as the build's µs.
"""
import argparse
import math
import statistics
import sys
from pathlib import Path

import cupy
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))
import _own_kernels_gpu as okg  # noqa: E402
import bench  # noqa: E402  (paged_layer)
from bench_gemv_tma import capture  # noqa: E402
from probe_gemv_timeline import RECORD as GEMV_RECORD  # noqa: E402
from probe_gemv_timeline import RecordBuffer, record_dtype  # noqa: E402

ATTN_RECORD = record_dtype(8)
"""attn_decode_cluster.cu's records (80 bytes; tag = the launch's output row)."""
LAYERS, N_Q, N_KV, D, HIDDEN, CTX = 36, 32, 8, 128, 2560, 144
SPLITS = 8


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cubins", help="a build with -D KERN_GEMV_TIMELINE=1 -D KERN_ATTN_TIMELINE=1")
    d = Path(ap.parse_args().cubins)
    launch = okg.pdl_launcher()
    gm = cupy.RawModule(path=str(d / "gemv.cubin"))
    am = cupy.RawModule(path=str(d / "attn_decode_cluster.cubin"))
    g_et, g_plain = gm.get_function("kern_gemv_et_bf16"), gm.get_function("kern_gemv_bf16")
    attn = am.get_function(f"kern_attn_decode_cluster_rope_norm_bf16_d{D}")
    gbuf, abuf = RecordBuffer(gm, GEMV_RECORD), RecordBuffer(am, ATTN_RECORD, 200_000)
    print(torch.cuda.get_device_name(0), flush=True)

    gen = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*shape, scale=0.02):
        return (torch.randn(shape, generator=gen, device="cuda") * scale).to(torch.bfloat16)

    nqkv = (N_Q + 2 * N_KV) * D
    w_qkv = [rnd(nqkv, HIDDEN) for _ in range(LAYERS)]
    w_o = [rnd(HIDDEN, N_Q * D) for _ in range(LAYERS)]
    x = rnd(1, HIDDEN, scale=1.0)
    qkv = [torch.empty((1, nqkv), dtype=torch.bfloat16, device="cuda") for _ in range(LAYERS)]
    att = [torch.empty((1, N_Q * D), dtype=torch.bfloat16, device="cuda") for _ in range(LAYERS)]
    o = torch.empty((1, HIDDEN), dtype=torch.bfloat16, device="cuda")
    pools = [bench.paged_layer(N_KV, D, [CTX], False, gen) for _ in range(LAYERS)]
    q_w, k_w = rnd(D, scale=1.0), rnd(D, scale=1.0)
    ang = torch.rand((D // 2, 1), generator=gen, device="cuda") * 6.0
    lens = torch.full((1,), CTX, dtype=torch.int32, device="cuda")
    slots = [torch.tensor([int(t[0, (CTX - 1) // okg.PAGE]) * okg.PAGE + (CTX - 1) % okg.PAGE],
                          dtype=torch.int64, device="cuda") for _, _, t in pools]
    p, stream = okg.ptr, (lambda: torch.cuda.current_stream().cuda_stream)

    def gemv(fn, a, w, c):
        n, k = w.shape
        launch(fn, (-(-n // 16), 1, 1), (32 * okg.gemv_warps(n, k), 1, 1), 0, stream(),
               [p(a), p(w), p(c), np.int32(1), np.int32(n), np.int32(k)])

    def attention(i):
        kc, vc, table = pools[i]
        launch(attn, (N_KV, SPLITS, 1), (256, 1, 1), 0, stream(),
               [p(qkv[i]), p(q_w), p(k_w), p(ang), p(slots[i]), p(kc), p(vc), p(lens),
                p(table), p(att[i]), np.int32(1), np.int64(kc.stride(0)),
                np.int64(kc.stride(1)), np.int64(vc.stride(0)), np.int64(vc.stride(1)),
                np.int32(N_Q), np.int32(N_KV), np.float32(1 / math.sqrt(D)),
                np.int32(table.stride(0)), np.int64(kc.shape[0]), np.float32(1e-6)])

    def step(with_attention: bool):
        def run():
            for i in range(LAYERS):
                gemv(g_et, x, w_qkv[i], qkv[i])
                if with_attention:
                    attention(i)
                gemv(g_plain, att[i], w_o[i], o)
        return run

    res = {}
    for name, with_attn in (("with attention", True), ("o right after qkv", False)):
        g = capture(step(with_attn))
        for _ in range(5):
            g.replay()
        torch.cuda.synchronize()
        gbuf.reset()
        abuf.reset()
        torch.cuda.synchronize()
        g.replay()
        torch.cuda.synchronize()
        res[name] = (gbuf.records(), abuf.records() if with_attn else None)
    report(res, w_qkv, w_o, att)


def _med(v):
    return statistics.median(v) / 1e3


def report(res, w_qkv, w_o, att) -> None:
    grec, arec = res["with attention"]
    g0, _ = res["o right after qkv"]
    t = arec["t"].astype(np.int64)
    ts = np.unique(t.ravel())
    print(f"== {len(arec)} attention block records, {len(grec)} GEMV block records; "
          f"%globaltimer granularity {int(np.diff(ts)[np.diff(ts) > 0].min())} ns")
    cols = ["launch", "spread", "wait", "q ready", "pass", "sync 1", "merge", "sync 2", "exit",
            "o wait", "step"]
    rows, base = [], []
    for i in range(LAYERS):
        qk = grec[grec["tag"] == w_qkv[i].data_ptr()]["t"].astype(np.int64)
        og = grec[grec["tag"] == w_o[i].data_ptr()]["t"].astype(np.int64)
        lo = att[i].data_ptr()        # a block's tag is its output row, inside att[i]
        a = arec[(arec["tag"] >= lo) & (arec["tag"] < lo + att[i].numel() * 2)]
        at = a["t"].astype(np.int64)
        rank0 = (a["block"] // 8) % 8 == 0
        q_store, a_exit = qk[:, 5].max(), at[:, 7].max()
        rows.append([np.median(at[:, 0]) - np.median(qk[:, 2]), at[:, 0].max() - at[:, 0].min(),
                     np.median(at[:, 2]) - q_store, np.median(at[:, 3] - at[:, 2]),
                     np.median(at[:, 4] - at[:, 3]), np.median(at[:, 5] - at[:, 4]),
                     np.median(at[rank0, 6] - at[rank0, 5]), np.median(at[:, 7] - at[:, 6]),
                     a_exit - q_store, np.median(og[:, 2]) - a_exit, og[:, 5].max() - q_store])
        qk0 = g0[g0["tag"] == w_qkv[i].data_ptr()]["t"].astype(np.int64)
        og0 = g0[g0["tag"] == w_o[i].data_ptr()]["t"].astype(np.int64)
        base.append([np.median(og0[:, 2]) - qk0[:, 5].max(), og0[:, 5].max() - qk0[:, 5].max()])
    print("  µs, medians over the layers (the first layer's qkv has no predecessor)")
    print("  " + "".join(f"{c:>9s}" for c in cols))
    print("  " + "".join(f"{_med([r[j] for r in rows[1:]]):9.2f}" for j in range(len(cols))))
    print(f"  o right after qkv (no attention): o wait {_med([b[0] for b in base[1:]]):.2f} "
          f"after qkv's last store, step {_med([b[1] for b in base[1:]]):.2f} µs (o's last "
          f"store - qkv's)")


if __name__ == "__main__":
    main()
