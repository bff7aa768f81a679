"""The command line: bad options are one line and exit 2; an engine that cannot start or whose
loop fails ends the server with one line and a nonzero status, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
from typer.testing import CliRunner

from kern_serve.cli import app
from kserve_helpers import Server, free_port


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kern_serve.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("args,msgs", [
    (["--max-seqs", "0", "--port", "70000"], ["--max-seqs must be at least 1", "--port 70000"]),
    (["--engine-option", "novalue"], ["give KEY=VALUE"]),
    (["--capacity", "8"], ["--capacity must be at least 16"]),
    (["--manifest", "/nonexistent/m.json", "--weights", "/nonexistent/w.safetensors",
      "--tokenizer", "/nonexistent"], ["--manifest `/nonexistent/m.json`: no such file"]),
    (["bench", "--concurrency", "x"], ["--concurrency"]),
])
def test_bad_options_are_one_line_and_exit_2(args, msgs):
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert all(m in r.output for m in msgs), r.output
    assert "Traceback" not in r.output and r.exception is None or isinstance(r.exception,
                                                                             SystemExit)


def test_engine_that_cannot_start_ends_the_server():
    r = _run("--port", str(free_port()), "--engine-factory", "no_such_module:make")
    assert r.returncode != 0, r.stderr
    assert "kern-serve: the engine failed: --engine-factory `no_such_module:make`" in r.stderr
    assert "Traceback" not in r.stderr


def test_engine_loop_failure_fails_the_request_and_exits_1(tmp_path):
    s = Server(tmp_path, options={"fail_after": "3"})
    try:
        r = httpx.post(s.url + "/v1/completions", json={"prompt": "x", "max_tokens": 50},
                       timeout=10)
        assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
        assert "engine step failed" in r.json()["error"]["message"]
        assert s.wait_exit(15) == 1
        assert "Traceback" not in s.log
    finally:
        s.close()
