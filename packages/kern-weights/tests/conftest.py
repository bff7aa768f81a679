"""kern-weights tests: the export fixtures of :mod:`kw_fixtures`."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from kw_fixtures import make_manifest, read_st, write_st  # noqa: E402,F401
