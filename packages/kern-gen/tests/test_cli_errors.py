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


@pytest.mark.parametrize("argv, message", [
    (["llama", "--attention", "bogus"],
     "--attention `bogus`: choose one of split, one-launch, cluster, cluster-rope"),
    (["qwen3", "--verify-splits", "many"],
     "--verify-splits `many`: choose divided, decode or a split count 1-256"),
    (["qwen3", "--verify-attention", "tiles"],
     "--verify-attention `tiles`: choose one of split, rows, verify-rows"),
])
def test_a_bad_choice_is_one_line_naming_the_choices(tmp_path, argv, message):
    out = tmp_path / "out"
    r = CliRunner().invoke(app, [*argv, "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert r.output.splitlines() == [f"kern-gen {argv[0]}: refused: {message}"]
    assert not out.exists()
