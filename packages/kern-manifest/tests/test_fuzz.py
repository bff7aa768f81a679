"""Fuzzing the manifest decoder, verifier, renderers, encoder and CLI (``fuzz_manifest.py``):
no input makes them raise anything but the tool's own error, or exit other than 0/1/2.

CI runs a bounded number of cases, derandomized (~10 s); ``KERN_FUZZ_CASES=20000`` runs that
many with fresh random seeds. ``bench/fuzz_verify.py --cases N`` runs N seeded cases and
counts failures by signature instead of stopping at the first.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_manifest import check, make_case  # noqa: E402

CASES = int(os.environ.get("KERN_FUZZ_CASES", "0")) or None


@settings(max_examples=CASES or 200, derandomize=CASES is None, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.randoms(use_true_random=True))
def test_no_input_escapes_the_error_type(tmp_path_factory, rnd):
    check(make_case(rnd), tmp_path_factory.getbasetemp() / "fuzz-manifest.json")
