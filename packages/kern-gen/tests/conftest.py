"""kern-gen tests: the ``kern-gen export`` command tests use kern-weights' export fixtures
(:mod:`kw_fixtures`: an independent safetensors writer/reader and a manifest factory)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kern-weights" / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))     # kg_own

from kw_fixtures import make_manifest, read_st, write_st  # noqa: E402,F401

