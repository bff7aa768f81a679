"""``kern-gen llama`` finds the checkout's files wherever it is run from (``kern_gen.llama.repo``):
the presets' defaults resolve in the checkout, a missing input or checkout is refused in one
line with exit status 2 (no traceback)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kern_gen.cli import app
from kern_gen.llama import WiringError, repo

ROOT = Path(__file__).resolve().parents[3]


def _refusal(res, *needles: str) -> str:
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kern-gen "), res.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_root_is_found_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert repo.root() == ROOT
    assert repo.find("examples/smollm2-135m/config.json", "config").is_file()


def test_missing_inputs_are_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["qwen3", "--capture", "nowhere"])
    _refusal(res, "kern-gen qwen3: refused: capture `nowhere` does not exist")
    res = CliRunner().invoke(app, ["llama", "--sidecar", str(tmp_path / "sc.json")])
    _refusal(res, "provider sidecar", "does not exist")


def test_no_checkout_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(repo, "MARKER", Path("no/such/marker.py"))
    res = CliRunner().invoke(app, ["llama"])
    _refusal(res, "capture `tests/fixtures/captures/smollm2-135m`", "no kern checkout found")


def test_defaults_resolve_in_the_checkout_from_elsewhere(tmp_path, monkeypatch):
    """From a directory outside the checkout, the preset's capture and config are the
    checkout's: with nvcc the example is written; without, the own-kernel build is refused
    in one line."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["llama", "--out", str(out)])
    if shutil.which("nvcc") or Path("/usr/local/bin/nvcc").exists() \
            or Path("/usr/local/cuda/bin/nvcc").exists():
        assert res.exit_code == 0, res.output
        ex = ROOT / "examples/smollm2-135m"
        assert (out / "manifest.json").read_bytes() == (ex / "manifest.json").read_bytes()
        assert res.stdout.startswith(f"wrote {out}/manifest.json")
    else:
        _refusal(res, "own kernels", "nvcc not found")


@pytest.mark.parametrize("rel", ["tests/fixtures/captures/qwen3-4b-random",
                                 "examples/qwen3-4b/config.json"])
def test_a_missing_checkout_file_is_named(rel, tmp_path, monkeypatch):
    monkeypatch.setattr(repo, "root", lambda: tmp_path)
    with pytest.raises(WiringError, match=f"`{rel}` is missing from the kern checkout at"):
        repo.find(rel, "input")
