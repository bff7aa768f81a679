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


def test_an_unknown_attention_is_one_line_naming_the_choices(tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["llama", "--attention", "bogus", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert r.output.splitlines() == [
        "kern-gen llama: refused: --attention `bogus`: choose one of split, one-launch, "
        "cluster, cluster-rope"]
    assert not out.exists()
