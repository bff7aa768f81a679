"""Benchmark: mining time of a capture of >= 10k launches (not a timed test).

    uv run python packages/kern-mine/bench/bench_mine.py [CAPTURE] [--runs N]

Without CAPTURE, builds a synthetic one (tests/kern_mine_synth.py: 36 layers, 7 requests of a
prefill + 3 decodes, autotuning repetitions, cache resets, 10% boundary jitter) in a temporary
directory.  Prints the median and spread over N runs (after one warm-up) of reading the
capture (``read_capture``) and of mining it (``mine`` on the read capture), and the two
together.  Target: read + mine < 2 s median.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kern_mine import mine, read_capture
from kern_mine.fit import _fit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", nargs="?", type=Path)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.capture
        if path is None:
            from kern_mine_synth import build_capture

            path = Path(tmp) / "cap"
            build_capture(path, layers=36, requests=((7, 3), (34, 3), (85, 3), (175, 3), (300, 3), (600, 3), (1000, 3)),
                          autotune=600, jitter=0.1, seed=1)
        reads, mines, both = [], [], []
        for i in range(args.runs + 1):
            _fit.cache_clear()  # no fit memo carried between runs
            t0 = time.perf_counter()
            cap = read_capture(path)
            t1 = time.perf_counter()
            m = mine(cap)
            t2 = time.perf_counter()
            if i:
                reads.append(t1 - t0)
                mines.append(t2 - t1)
                both.append(t2 - t0)
        sites = sum(len(g.sites) for g in m.groups)
        print(f"capture: {path} ({m.launches} launches: {m.dummy} benchmark, {m.kept} kept; "
              f"{len(m.passes)} passes, {len(m.groups)} groups, {sites} call sites)")
        print(f"python {platform.python_version()} on {platform.machine()}, {args.runs} runs after 1 warm-up")
        for name, xs in (("read", reads), ("mine", mines), ("read+mine", both)):
            print(f"  {name:10s} median {statistics.median(xs) * 1e3:8.1f} ms   min {min(xs) * 1e3:8.1f}   "
                  f"max {max(xs) * 1e3:8.1f}")
        ok = statistics.median(both) < 2.0
        print(f"target read+mine < 2 s median: {'met' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
