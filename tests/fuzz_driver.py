"""The seeded fuzz run the packages' ``bench/fuzz_*.py`` scripts share: N cases (seeds
S..S+N-1) through one ``run_case(seed, tmp)``, failures counted by signature (exception type,
file, line) instead of stopping at the first, the table printed with one failing seed each.
Not a test (pytest does not collect it); the scripts import it by path."""

from __future__ import annotations

import argparse
import collections
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable


def fuzz_main(description: str, run_case: Callable[[int, Path], str], prefix: str,
              argv: list[str] | None = None) -> int:
    """``run_case(seed, tmp)`` returns the case's outcome label; any exception is a failure.
    Exit status 1 if any case failed."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--cases", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    outcomes: collections.Counter[str] = collections.Counter()
    failures: collections.Counter[tuple] = collections.Counter()
    example: dict[tuple, str] = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for n in range(args.seed, args.seed + args.cases):
            try:
                outcomes[run_case(n, Path(tmp))] += 1
            except Exception as e:  # noqa: BLE001 - counting is the point
                last = traceback.extract_tb(e.__traceback__)[-1]
                sig = (type(e).__name__, Path(last.filename).name, last.lineno)
                failures[sig] += 1
                example.setdefault(sig, f"seed {n}: {str(e)[:200]!r}")
    dt = time.perf_counter() - t0
    total = sum(outcomes.values()) + sum(failures.values())
    print(f"{total} cases in {dt:.0f} s: {dict(outcomes)}; failures: {sum(failures.values())} "
          f"({len(failures)} signatures)")
    for sig, n in failures.most_common():
        print(f"  {n:6d}  {sig[0]} at {sig[1]}:{sig[2]}  e.g. {example[sig]}")
    return 1 if failures else 0
