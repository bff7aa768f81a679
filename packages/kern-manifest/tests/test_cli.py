"""The `kern-manifest` command: exit statuses, human and JSON reports, schema, explain."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kern_manifest.cli import app

runner = CliRunner()


def _write(tmp_path, name, doc):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=1))
    return p


def test_clean_exit_0(toy_path, compat_path):
    r = runner.invoke(app, ["verify", str(toy_path), str(compat_path)])
    assert r.exit_code == 0, r.output
    assert r.output.count(": ok") == 2


def test_verification_errors_exit_1(tmp_path, toy):
    toy["buffers"]["h"]["dtype"] = "f32"
    p = _write(tmp_path, "m.json", toy)
    r = runner.invoke(app, ["verify", str(p)])
    assert r.exit_code == 1
    assert "error[E0604]" in r.output and "programs.step.dispatches[0].args[2]" in r.output
    assert f"{p}:" in r.output


def test_undecodable_exit_2_wins_over_1(tmp_path, toy):
    bad = _write(tmp_path, "bad.json", '{"meta": ')
    toy["buffers"]["h"]["dtype"] = "f32"
    failing = _write(tmp_path, "m.json", toy)
    missing = tmp_path / "missing.json"
    r = runner.invoke(app, ["verify", str(failing), str(bad), str(missing)])
    assert r.exit_code == 2
    assert "E0002" in r.output and "E0001" in r.output and "E0604" in r.output


def test_json_report(tmp_path, toy, toy_path):
    toy["buffers"]["spare"] = {"dtype": "u8", "shape": [1], "class": "workspace"}
    p = _write(tmp_path, "m.json", toy)
    r = runner.invoke(app, ["verify", "--json", str(toy_path), str(p)])
    assert r.exit_code == 1
    report = json.loads(r.stdout)
    assert report["version"] == 1
    ok, bad = report["files"]
    assert ok == {"file": str(toy_path), "ok": True, "diagnostics": []}
    assert bad["ok"] is False and bad["stage"] == "verify"
    assert bad["diagnostics"][0]["code"] == "E0801"
    assert bad["diagnostics"][0]["path"] == "buffers.spare"


def test_schema_is_json_schema():
    r = runner.invoke(app, ["schema"])
    assert r.exit_code == 0
    schema = json.loads(r.stdout)
    assert schema["$schema"].endswith("2020-12/schema")
    assert "Manifest" in schema["$defs"]
    pattern = schema["$defs"]["Kernel"]["properties"]["params"]["items"]["pattern"]
    assert "buffer<" in pattern


def test_explain():
    r = runner.invoke(app, ["explain", "e0604"])
    assert r.exit_code == 0 and r.stdout.startswith("E0604: buffer dtype mismatch")
    r = runner.invoke(app, ["explain", "E9999"])
    assert r.exit_code == 2 and "unknown code" in r.output
