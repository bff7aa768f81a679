"""Shared fixtures. Golden files regenerate with ``pytest --update-goldens``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TOY = ROOT / "examples" / "toy" / "manifest.json"
COMPAT = ROOT / "tests" / "fixtures" / "compat" / "qwen3-4b.json"
GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.fixture
def toy() -> dict:
    """A fresh, mutable copy of the spec's small valid manifest."""
    return json.loads(TOY.read_text())


@pytest.fixture
def update_goldens(request) -> bool:
    return request.config.getoption("--update-goldens")


def _diagnose(doc):
    from kern_manifest import DecodeError, decode, verify

    text = doc if isinstance(doc, str) else json.dumps(doc)
    try:
        manifest = decode(text)
    except DecodeError as err:
        return err.diagnostics
    return verify(manifest)


@pytest.fixture
def diagnose():
    """``diagnose(doc)``: every diagnostic of a dict or JSON text, decode or verify stage."""
    return _diagnose


@pytest.fixture
def pairs():
    """``pairs(doc)``: the set of ``(code, path)`` of every diagnostic."""
    return lambda doc: {(d.code, d.path) for d in _diagnose(doc)}


@pytest.fixture
def compat_path() -> Path:
    return COMPAT


@pytest.fixture
def toy_path() -> Path:
    return TOY
