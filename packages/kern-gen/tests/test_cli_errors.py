"""``kern-gen llama`` / ``qwen3`` on input it cannot read: one line naming the place, exit 2,
no traceback, nothing written."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kern_gen.cli import app


@pytest.mark.parametrize("preset", ["llama", "qwen3"])
def test_missing_capture_is_one_line(tmp_path, preset):
    missing, out = tmp_path / "no-capture", tmp_path / "out"
    r = CliRunner().invoke(app, [preset, "--capture", str(missing), "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert r.output.splitlines() == [
        f"kern-gen {preset}: refused: capture `{missing}` does not exist"]
    assert not out.exists()
