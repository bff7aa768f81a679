"""kern-mine test fixtures: synthetic captures (kern_mine_synth) and the golden flag."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from kern_mine_synth import build_capture  # noqa: E402


@pytest.fixture
def update_goldens(request) -> bool:
    return request.config.getoption("--update-goldens")


@pytest.fixture
def synth(tmp_path):
    """``synth(**knobs) -> (capture_dir, truth)``: a fresh synthetic capture."""
    counter = iter(range(1000))

    def make(**kw):
        d = tmp_path / f"cap{next(counter)}"
        return d, build_capture(d, **kw)

    return make
