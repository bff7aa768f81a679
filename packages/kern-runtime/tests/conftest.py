"""Shared fixtures. GPU tests are marked ``@pytest.mark.gpu`` and skip cleanly unless
``cuInit`` succeeds and a device is present (probed once per session)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


_PROBE: tuple[bool, str] | None = None


def gpu_probe() -> tuple[bool, str]:
    """(usable, reason), probed once: cuInit succeeds and a device is present."""
    global _PROBE
    if _PROBE is None:
        from kern_runtime import gpu_available
        _PROBE = gpu_available()
    return _PROBE


def pytest_collection_modifyitems(config, items):
    # A skip marker (not a fixture) so that module-scoped GPU fixtures never run without a GPU.
    gpu_items = [it for it in items if it.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    ok, why = gpu_probe()
    if not ok:
        skip = pytest.mark.skip(reason=f"no usable GPU: {why}")
        for it in gpu_items:
            it.add_marker(skip)
