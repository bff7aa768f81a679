"""The CLI: report and JSON goldens (regenerate with ``pytest --update-goldens``), bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kern_mine import MINED_VERSION, MineError, decode_json, mine
from kern_mine.cli import app

GOLDEN = Path(__file__).resolve().parent / "golden"
FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "captures"
runner = CliRunner()


def _small(synth):
    return synth(layers=1, requests=((7, 1), (34, 1), (85, 1)), autotune=10, jitter=0.0)


def test_report_and_json_goldens(synth, tmp_path, update_goldens):
    d, _ = _small(synth)
    out = tmp_path / "mined.json"
    res = runner.invoke(app, [str(d), "--json", str(out)])
    assert res.exit_code == 0, res.output
    got = {"report.txt": res.output.replace(str(d), "<capture>"),
           "mined.json": out.read_text().replace(str(d), "<capture>")}
    for name, text in got.items():
        path = GOLDEN / name
        if update_goldens:
            path.write_text(text)
        assert path.exists(), f"missing golden {name}: run pytest --update-goldens"
        assert text == path.read_text(), f"{name} differs; if intended, --update-goldens"


def test_json_is_versioned_and_round_trips(synth, tmp_path):
    d, _ = _small(synth)
    res = runner.invoke(app, [str(d), "--json", "-"])
    assert res.exit_code == 0
    doc = json.loads(res.output)
    assert doc["format"] == "kern-mined" and doc["version"] == MINED_VERSION
    assert decode_json(res.output) == mine(d)


def test_missing_capture_is_a_clear_error(tmp_path):
    res = runner.invoke(app, [str(tmp_path / "nope")])
    assert res.exit_code == 2
    assert "nope" in res.output and "Traceback" not in res.output


def test_malformed_line_names_file_and_line(tmp_path):
    f = tmp_path / "launches.jsonl"
    f.write_text('{"seq":0,"t_ns":1,"api":"cuLaunchKernel","grid":[1,1,1],"block":[1,1,1],"smem":0}\n'
                 '{"seq":1,"t_ns":2,"api":"cuLaunchKernel","grid":"x","block":[1,1,1],"smem":0}\n')
    res = runner.invoke(app, [str(f)])
    assert res.exit_code == 2
    assert f"{f}:2:" in res.output and "Traceback" not in res.output


def test_request_out_of_range(synth):
    d, _ = _small(synth)
    res = runner.invoke(app, [str(d), "--request", "9"])
    assert res.exit_code == 2 and "--request 9" in res.output


def test_reader_fixture_and_empty_capture(tmp_path):
    m = mine(FIXTURES / "synthetic-v1")
    assert m.launches == 6 and m.not_executed == 1 and m.passes == [] and m.warnings == []
    (tmp_path / "launches.jsonl").write_text("\n")
    with pytest.raises(MineError, match="launches.jsonl: no launch records"):
        mine(tmp_path)
