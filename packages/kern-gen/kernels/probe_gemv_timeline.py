"""Where a layer GEMV's time goes in a decode step's GEMM chain (issue 16: each loses 2–3 µs
against the lm_head's copy rate, and why was never measured).  A build with
``-D KERN_GEMV_TIMELINE=1`` (gemv_core.cuh) has thread 0 of every block read %globaltimer at
its entry, after its first W batch is issued, when its grid-dependency wait returns, after
its first batch is multiplied (A and that batch arrived), at the end of its main loop and
after its store.  This runs one model's step GEMMs as the examples launch them (per layer
qkv with ``kern_gemv_et_bf16``, o, gate_up + SiLU, down; then lm_head; the generator's
warps, distinct weights, PDL, one CUDA graph), replays it, and prints per shape the medians
over the layers of:

- ``launch``: the first block's entry after the previous GEMV's last main-loop end (under
  PDL the previous one triggers there); ``spread``: last block entry - first;
- ``wait``: the wait's return (median block) after the previous GEMV's last store;
- ``A+W1``: the first multiply after the wait (A's round trip, and W1 if not yet there);
- ``loop``: the rest of the main loop (median block); ``tail``: last block's loop end -
  the median block's; ``store``: the epilogue (median);
- ``step``: this GEMV's last store - the previous one's (its share of the chain) and the
  HBM rate that gives; ``busy SMs``: the loop end on the SMs running the most of its
  blocks minus on those running the fewest (load imbalance: e.g. 160 tiles on 132 SMs for o
  and down; nan where every SM runs as many).

From the repository root on the GPU machine:

    python3 packages/kern-gen/kernels/build.py /tmp/own_tl -D KERN_GEMV_TIMELINE=1
    python3 packages/kern-gen/kernels/probe_gemv_timeline.py /tmp/own_tl [--model smollm2]

The instrumented kernels use a few more registers than the build's; read the rows as the
shape of the time, not as the build's µs.  %globaltimer's granularity is printed first.
"""
import argparse
import statistics
import sys
from pathlib import Path

import cupy
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))
import _own_kernels_gpu as okg  # noqa: E402
from bench_gemv_splitk import MODELS  # noqa: E402
from bench_gemv_tma import capture, launch  # noqa: E402


def record_dtype(n: int) -> np.dtype:
    """kern_timeline.cuh KernTlRecord<n>: tag, n stamps (ns), SM, linear block index."""
    return np.dtype([("tag", "<u8"), ("t", "<u8", n), ("sm", "<u4"), ("block", "<u4")])


RECORD = record_dtype(6)
"""gemv_core.cuh's records (64 bytes; tag = the GEMV's w)."""
CAP = 400_000


class RecordBuffer:
    """The record buffer a timeline build's module appends to (kern_timeline.cuh's kern_tl,
    kern_tl_n, kern_tl_cap), ``cap`` records of ``dtype``."""

    def __init__(self, mod, dtype: np.dtype, cap: int = CAP):
        self.mod, self.dtype, self.cap = mod, dtype, cap
        self.buf = cupy.zeros(cap * dtype.itemsize, dtype=cupy.uint8)
        self._set("kern_tl", np.uint64(self.buf.data.ptr))
        self._set("kern_tl_cap", np.uint32(cap))

    def _set(self, name: str, value) -> None:
        arr = np.array([value])
        self.mod.get_global(name).copy_from_host(arr.ctypes.data, arr.nbytes)

    def reset(self) -> None:
        self._set("kern_tl_n", np.uint32(0))

    def records(self) -> np.ndarray:
        n = np.zeros(1, dtype=np.uint32)
        self.mod.get_global("kern_tl_n").copy_to_host(n.ctypes.data, 4)
        if n[0] > self.cap:
            raise SystemExit(f"{n[0]} records, the buffer holds {self.cap}")
        return np.frombuffer(self.buf[: int(n[0]) * self.dtype.itemsize].get().tobytes(),
                             self.dtype)


class Timeline(RecordBuffer):
    def __init__(self, d: str):
        mod = cupy.RawModule(path=str(Path(d) / "gemv.cubin"))
        super().__init__(mod, RECORD)
        self.fn = {s: mod.get_function(s) for s in
                   ("kern_gemv_bf16", "kern_gemv_et_bf16", "kern_gemv_silu_bf16")}

    def __call__(self, symbol, a, w, c, silu=False):
        m, (rows, k) = a.shape[0], w.shape
        n = rows // 2 if silu else rows
        launch(self.fn[symbol], (-(-n // 16), -(-m // 8), 1), (32 * okg.gemv_warps(rows, k), 1, 1),
               0, [a.data_ptr(), w.data_ptr(), c.data_ptr(), m, n, k])


def run(tl: Timeline, model: str):
    layers, shapes = MODELS[model]
    gen = torch.Generator(device="cuda").manual_seed(0)
    W = {nm: [(torch.randn(s, generator=gen, device="cuda") * 0.02).to(torch.bfloat16)
              for _ in range(layers if nm != "lm_head" else 1)] for nm, s in shapes.items()}
    x = torch.randn((1, shapes["qkv"][1]), generator=gen, device="cuda").to(torch.bfloat16)
    att = torch.randn((1, shapes["o"][1]), generator=gen, device="cuda").to(torch.bfloat16)
    qkv = torch.empty((1, shapes["qkv"][0]), dtype=torch.bfloat16, device="cuda")
    o = torch.empty((1, shapes["o"][0]), dtype=torch.bfloat16, device="cuda")
    h = torch.empty((1, shapes["gate_up"][0] // 2), dtype=torch.bfloat16, device="cuda")
    logits = torch.empty((1, shapes["lm_head"][0]), dtype=torch.bfloat16, device="cuda")
    order = []                      # (w pointer, shape name) in launch order

    def step():
        order.clear()
        for i in range(layers):
            for sym, nm, a, c, silu in (("kern_gemv_et_bf16", "qkv", x, qkv, False),
                                        ("kern_gemv_bf16", "o", att, o, False),
                                        ("kern_gemv_silu_bf16", "gate_up", o, h, True),
                                        ("kern_gemv_bf16", "down", h, x, False)):
                tl(sym, a, W[nm][i], c, silu)
                order.append((W[nm][i].data_ptr(), nm))
        tl("kern_gemv_bf16", x, W["lm_head"][0], logits)
        order.append((W["lm_head"][0].data_ptr(), "lm_head"))

    g = capture(step)
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    tl.reset()
    torch.cuda.synchronize()
    g.replay()
    torch.cuda.synchronize()
    return tl.records(), list(order), shapes


def report(rec: np.ndarray, order, shapes, model: str) -> None:
    ts = np.unique(rec["t"].ravel())
    print(f"== {model}: {len(rec)} block records, {len(order)} launches; %globaltimer "
          f"granularity {int(np.diff(ts)[np.diff(ts) > 0].min())} ns")
    by_w = {w: rec[rec["tag"] == w] for w in {w for w, _ in order}}
    rows: dict[str, list[list[float]]] = {}
    for (pw, _), (w, nm) in zip(order, order[1:]):
        p, r = by_w[pw], by_w[w]
        t = r["t"].astype(np.int64)
        tp = p["t"].astype(np.int64)
        per_sm = np.bincount(r["sm"])
        used = per_sm[per_sm > 0]
        most, least = per_sm[r["sm"]] == used.max(), per_sm[r["sm"]] == used.min()
        imb = (float(np.median(t[most, 4]) - np.median(t[least, 4])) if used.max() > used.min()
               else float("nan"))
        rows.setdefault(nm, []).append([
            t[:, 0].min() - tp[:, 4].max(), t[:, 0].max() - t[:, 0].min(),
            np.median(t[:, 2]) - tp[:, 5].max(), np.median(t[:, 3] - t[:, 2]),
            np.median(t[:, 4] - t[:, 3]), t[:, 4].max() - np.median(t[:, 4]),
            np.median(t[:, 5] - t[:, 4]), t[:, 5].max() - tp[:, 5].max(), imb])
    cols = ["launch", "spread", "wait", "A+W1", "loop", "tail", "store", "step", "busy SMs"]
    print("  µs, medians over the layers (the first layer's qkv has no predecessor)")
    print(f"  {'shape':8s}" + "".join(f"{c:>10s}" for c in cols) + f"{'TB/s':>8s}")
    for nm, vals in rows.items():
        med = [statistics.median(v[i] for v in vals) / 1e3 for i in range(len(cols))]
        n, k = shapes[nm]
        print(f"  {nm:8s}" + "".join(f"{v:10.2f}" for v in med)
              + f"{2 * n * k / (med[7] * 1e-6) / 1e12:8.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cubins", help="a build with -D KERN_GEMV_TIMELINE=1")
    ap.add_argument("--model", choices=sorted(MODELS), default="qwen3")
    args = ap.parse_args()
    tl = Timeline(args.cubins)
    report(*run(tl, args.model), args.model)


if __name__ == "__main__":
    main()
