"""Regression tests for issue 17 item 9 (and the rest of the reader's input path): every bad
capture exits 2 with one line naming the file (and line where known), never a traceback; a
partial last line is dropped with a warning naming its line; ``--help`` describes the tool."""

from __future__ import annotations

import gzip
import json
import lzma
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kern_mine import MineError, encode_json, mine
from kern_mine.capture_format import CaptureFormatError, read_capture
from kern_mine.cli import app

SYNTH = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "captures" / "synthetic-v1"
LINES = (SYNTH / "launches.jsonl").read_bytes()
runner = CliRunner()


def _cli(*args: str):
    res = runner.invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    return res


def _refused(path: Path, *where: str) -> str:
    """The one error line of the CLI for ``path``, after checking exit 2 and ``where``."""
    res = _cli(str(path), "-q")
    assert res.exit_code == 2, res.output
    (line,) = res.output.strip().splitlines()
    assert line.startswith(f"kern-mine: error: {path}")
    for w in where:
        assert w in line, line
    with pytest.raises(MineError):
        mine(path)
    return line


def test_issue_reproducer_truncated_gzip(tmp_path):
    f = tmp_path / "t.jsonl.gz"
    f.write_bytes(gzip.compress(LINES)[:400])
    _refused(f, "compressed stream ends early", "truncated")


def test_truncated_gzip_after_some_lines_names_the_last_good_line(tmp_path):
    f = tmp_path / "t.jsonl.gz"
    f.write_bytes(gzip.compress(LINES * 200)[:-20])
    line = _refused(f, "truncated")
    assert ": after line " in line


def test_issue_reproducer_corrupt_gzip_body(tmp_path):
    data = bytearray(gzip.compress(LINES))
    data[40] ^= 0xFF
    data[41] ^= 0x55
    f = tmp_path / "c.jsonl.gz"
    f.write_bytes(bytes(data))
    _refused(f, "corrupt compressed data")


@pytest.mark.parametrize("name, data", [
    ("launches.jsonl.gz", b"not gzip at all"),
    ("launches.jsonl.xz", b"not xz"),
    ("launches.jsonl.xz", lzma.compress(LINES)[:-10]),
])
def test_not_or_broken_compressed(tmp_path, name, data):
    f = tmp_path / name
    f.write_bytes(data)
    _refused(f)


def test_issue_reproducer_truncated_last_line_warns_with_its_number(tmp_path):
    f = tmp_path / "launches.jsonl"
    f.write_bytes(LINES[:-30])
    res = _cli(str(f), "--json", str(tmp_path / "out.json"))
    assert res.exit_code == 0
    assert f"kern-mine: warning: {f}:6: partial last line dropped" in res.stderr
    mined = json.loads((tmp_path / "out.json").read_text())
    assert mined["launches"] == 5 and mined["warnings"] == [
        f"{f}:6: partial last line dropped (the capturing process was cut short mid-write)"]


def test_a_bad_line_that_is_not_last_is_an_error(tmp_path):
    lines = LINES.splitlines(keepends=True)
    f = tmp_path / "launches.jsonl"
    f.write_bytes(b"".join(lines[:2]) + lines[2][:40] + b"\n" + b"".join(lines[3:]))
    _refused(f, f"{f}:3:")


def test_issue_reproducer_empty_capture(tmp_path):
    (tmp_path / "launches.jsonl").write_bytes(b"")
    _refused(tmp_path, "launches.jsonl: no launch records")


def test_issue_reproducer_nonexistent_path(tmp_path):
    _refused(tmp_path / "nope", "does not exist")


def test_directory_without_a_capture(tmp_path):
    _refused(tmp_path, "not a capture directory")


@pytest.mark.parametrize("edit, where", [
    (lambda line: line.replace(b'"name":"', b'"name":"\xff', 1), "Invalid UTF-8"),
    (lambda line: line.replace(b'"bytes":"', b'"bytes":"zz', 1), "`params[0].bytes` is not hex"),
    (lambda line: line.replace(b'"bytes":"', b'"bytes":"0', 1), "`params[0].bytes` is not hex"),
    (lambda line: line.replace(b'"seq":', b'"later":' + b"[" * 50000 + b"]" * 50000 + b',"seq":', 1),
     "nesting too deep"),
    (lambda line: line.replace(b'"t_ns":', b'"t_ns":' + b"9" * 5000 + b',"x":', 1), "out of range"),
    (lambda line: line.replace(b'"smem":0', b'"smem":1e400', 1), "`$.smem`"),
])
def test_malformed_records_name_file_and_line(tmp_path, edit, where):
    lines = LINES.splitlines(keepends=True)
    lines[1] = edit(lines[1])
    assert lines[1] != LINES.splitlines(keepends=True)[1], "the edit must apply"
    f = tmp_path / "launches.jsonl"
    f.write_bytes(b"".join(lines))
    _refused(f, f"{f}:2:", where)


@pytest.mark.parametrize("name, data", [
    ("meta.json", b'{"format": "kern-capture", "version": '),
    ("meta.json", b"[" * 100000),
    ("summary.json", b'{"launches": "six"}'),
    ("modules.jsonl", b'{"module_id": 1}\n'),
])
def test_bad_side_files_are_named(tmp_path, name, data):
    d = tmp_path / "pid-1"
    shutil.copytree(SYNTH, d)
    (d / name).write_bytes(data)
    _refused(d, name)


def test_reader_raises_only_its_error(tmp_path):
    f = tmp_path / "launches.jsonl.gz"
    f.write_bytes(gzip.compress(LINES)[:100])
    with pytest.raises(CaptureFormatError, match="truncated"):
        read_capture(f)


def test_help_describes_the_tool_and_exit_statuses():
    res = _cli("--help")
    assert res.exit_code == 0
    assert "Mine a CUPTI capture" in res.output and "Exit status: 0 mined" in res.output


@pytest.mark.parametrize("opt", [["--gap-ms", "nan"], ["--gap-ms", "inf"], ["--gap-ms", "-1"],
                                 ["--min-distinct", "0"]])
def test_bad_options_are_usage_errors(opt):
    res = _cli(str(SYNTH), *opt)
    assert res.exit_code == 2


def test_unwritable_output_exits_1(tmp_path):
    res = _cli(str(SYNTH), "-q", "--json", str(tmp_path / "no" / "such" / "dir.json"))
    assert res.exit_code == 1 and "cannot write" in res.output


def test_encode_json_of_a_capture_with_a_partial_line(tmp_path):
    f = tmp_path / "launches.jsonl"
    f.write_bytes(LINES[:-30])
    assert b'"warnings": [' in encode_json(mine(f))
