"""Benchmark: decode and verify time of a manifest (default: the compat Qwen3-4B fixture).

    uv run python packages/kern-manifest/bench/bench_verify.py [MANIFEST] [--runs N]

Prints the median and spread of decode (JSON text -> structs), verify (all passes) and the
two together, over N runs after one warm-up. Target: decode + verify < 50 ms median.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

from kern_manifest import decode, verify

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "tests" / "fixtures" / "compat" / "qwen3-4b.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    data = args.manifest.read_bytes()
    m = decode(data)
    assert verify(m) == [], "benchmark input must verify clean"
    dec, ver, both = [], [], []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        m = decode(data)
        t1 = time.perf_counter()
        verify(m)
        t2 = time.perf_counter()
        dec.append(t1 - t0)
        ver.append(t2 - t1)
        both.append(t2 - t0)
    n_disp = sum(len(p.dispatches) for p in m.programs.values())
    print(f"manifest: {args.manifest.name} ({len(data) / 1e3:.0f} kB, {len(m.buffers)} buffers, "
          f"{len(m.kernels)} kernels, {n_disp} dispatches)")
    print(f"machine: {platform.processor() or platform.machine()}, Python "
          f"{platform.python_version()}, {args.runs} runs")
    print(f"{'stage':<16}{'median ms':>10}{'min ms':>9}{'max ms':>9}")
    for name, xs in (("decode", dec), ("verify", ver), ("decode+verify", both)):
        print(f"{name:<16}{statistics.median(xs) * 1e3:>10.2f}{min(xs) * 1e3:>9.2f}"
              f"{max(xs) * 1e3:>9.2f}")
    print(f"target decode+verify < 50 ms: {'met' if statistics.median(both) < 0.05 else 'MISSED'}")


if __name__ == "__main__":
    main()
