"""Fuzzing the capture reader, the miner and the CLI (``fuzz_capture.py``): no capture makes
them raise anything but the tool's own error, or exit other than 0/2 (1: output unwritable).

CI runs a bounded number of cases, derandomized (~10 s); ``KERN_FUZZ_CASES=20000`` runs that
many with fresh random seeds. ``bench/fuzz_mine.py --cases N`` runs N seeded cases and counts
failures by signature instead of stopping at the first.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_capture import check, make_case

CASES = int(os.environ.get("KERN_FUZZ_CASES", "0")) or None


@settings(max_examples=CASES or 150, derandomize=CASES is None, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.randoms(use_true_random=True))
def test_no_capture_escapes_the_error_type(tmp_path_factory, rnd):
    check(make_case(rnd, tmp_path_factory.getbasetemp() / "fuzz-capture"))
