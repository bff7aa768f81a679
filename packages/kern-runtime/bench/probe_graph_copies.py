"""Probe (device only): what a tiny device-to-device memcpy node costs inside a CUDA graph,
against a kernel node doing the same copy, between small dependent kernels.

The pipelined DSpark round (kern_run.spec.dspark_pipeline) holds six copies of a few bytes;
this says whether those nodes are worth replacing by one copy kernel. Graphs of N repeats of
[tiny kernel, X] are replayed and timed with events (median of REPS replays); the cost of X
is (graph with X - graph without) / N.

    python3 packages/kern-runtime/bench/probe_graph_copies.py
"""

from __future__ import annotations

import statistics

import cupy as cp

N, REPS = 200, 25

SRC = r"""
extern "C" __global__ void tick(long long* a) {
    if (threadIdx.x == 0) a[0] += 1;
}
extern "C" __global__ void copy_words(long long* dst, const long long* src, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}
"""


def main() -> None:
    mod = cp.RawModule(code=SRC)
    tick, copy_words = mod.get_function("tick"), mod.get_function("copy_words")
    a = cp.zeros(64, cp.int64)
    bufs = [cp.arange(16, dtype=cp.int64) for _ in range(12)]
    s = cp.cuda.Stream(non_blocking=True)
    kind = cp.cuda.runtime.memcpyDeviceToDevice

    def memcpy(k: int) -> None:
        d, src = bufs[2 * k % 12], bufs[(2 * k + 1) % 12]
        cp.cuda.runtime.memcpyAsync(d.data.ptr, src.data.ptr, 64, kind, s.ptr)

    variants = {
        "kernel only": lambda: None,
        "+1 memcpy node": lambda: memcpy(0),
        "+2 memcpy nodes": lambda: (memcpy(0), memcpy(1)),
        "+4 memcpy nodes": lambda: [memcpy(k) for k in range(4)],
        "+1 copy kernel": lambda: copy_words((1,), (32,), (bufs[0], bufs[1], cp.int32(8)),
                                             stream=s),
    }
    base = None
    print(f"graphs of {N} x [tiny kernel, X], median of {REPS} replays")
    for name, extra in variants.items():
        with s:
            s.begin_capture()
            for _ in range(N):
                tick((1,), (32,), (a,), stream=s)
                extra()
            g = s.end_capture()
        g.upload(s)
        times = []
        for _ in range(REPS):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(s)
            g.launch(s)
            e1.record(s)
            e1.synchronize()
            times.append(cp.cuda.get_elapsed_time(e0, e1) * 1000 / N)
        us = statistics.median(times)
        base = us if base is None else base
        print(f"{name:18s} {us:6.2f} µs a repeat ({us - base:+.2f} µs for X)")


if __name__ == "__main__":
    main()
