"""Fuzz run: N hostile captures (tests/fuzz_capture.py, seeds S..S+N-1) through the reader,
``mine`` and the CLI; counts failures by signature (exception type, file, line) instead of
stopping at the first, and prints the table with one failing seed each. Exit status 1 if any
case failed.

    uv run --frozen python packages/kern-mine/bench/fuzz_mine.py [--cases 20000] [--seed S]

Replay one case: ``check(make_case(random.Random(SEED), root))`` from tests/fuzz_capture.py.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parents[1] / "tests"), str(HERE.parents[3] / "tests")]
from fuzz_driver import fuzz_main  # noqa: E402
from fuzz_capture import check, make_case  # noqa: E402


def main() -> int:
    return fuzz_main(__doc__.splitlines()[0], lambda n, tmp: check(make_case(random.Random(n), tmp / "case")), "kern-mine-fuzz-")


if __name__ == "__main__":
    sys.exit(main())
