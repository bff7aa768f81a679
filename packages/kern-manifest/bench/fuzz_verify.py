"""Fuzz run: N hostile manifests (tests/fuzz_manifest.py, seeds S..S+N-1) through decode,
verify, encode and the CLI; counts failures by signature (exception type, file, line) instead
of stopping at the first, and prints the table with one failing seed each. Exit status 1 if
any case failed.

    uv run --frozen python packages/kern-manifest/bench/fuzz_verify.py [--cases 20000] [--seed S]

Replay one case: ``check(make_case(random.Random(SEED)), path)`` from tests/fuzz_manifest.py.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fuzz_manifest import check, make_case  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    outcomes: collections.Counter[str] = collections.Counter()
    failures: collections.Counter[tuple] = collections.Counter()
    example: dict[tuple, str] = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kern-fuzz-") as tmp:
        path = Path(tmp) / "case.json"
        for n in range(args.seed, args.seed + args.cases):
            try:
                outcomes[check(make_case(random.Random(n)), path)] += 1
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


if __name__ == "__main__":
    sys.exit(main())
