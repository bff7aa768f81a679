"""kern-run tests. GPU tests are marked ``@pytest.mark.gpu`` and skip cleanly unless a CUDA
device is usable (probed once)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

_PROBE: tuple[bool, str] | None = None


def pytest_collection_modifyitems(config, items):
    global _PROBE
    mine = [it for it in items if it.get_closest_marker("gpu") is not None
            and "kern-run" in str(it.path)]
    if not mine:
        return
    if _PROBE is None:
        from kern_runtime import gpu_available
        _PROBE = gpu_available()
    ok, why = _PROBE
    if not ok:
        for it in mine:
            it.add_marker(pytest.mark.skip(reason=f"no usable GPU: {why}"))
