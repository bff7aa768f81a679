"""`kern-gen`: not implemented yet (issue 6); says so instead of failing obscurely."""

from __future__ import annotations

import sys


def main() -> None:
    sys.stderr.write("kern-gen: the generators are not implemented yet (issue 6); "
                     "own kernels build with `python3 packages/kern-gen/kernels/build.py OUT`\n")
    raise SystemExit(2)
