"""The command line: bad options are one line and exit 2; an engine that cannot start or whose
loop fails ends the server with one line and a nonzero status, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import httpx

from kserve_helpers import Server, free_port


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kern_serve.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_bad_options_are_one_line_and_exit_2():
    r = _run("--max-seqs", "0", "--port", "70000")
    assert r.returncode == 2, r.stderr
    assert "--max-seqs must be at least 1" in r.stderr and "--port 70000" in r.stderr
    assert "Traceback" not in r.stderr
    r = _run("--engine-factory", "kern_serve.adapter:open_fake", "--engine-option", "novalue")
    assert r.returncode == 2 and "give KEY=VALUE" in r.stderr


def test_engine_that_cannot_start_ends_the_server(tmp_path):
    # the default (GPU) factory on this machine: no GPU, or (on a GPU) a missing model file
    r = _run("--port", str(free_port()), "--manifest", str(tmp_path / "none.json"),
             "--weights", str(tmp_path / "w.safetensors"), "--tokenizer", str(tmp_path))
    assert r.returncode == 2 and "--manifest" in r.stderr and "Traceback" not in r.stderr
    r = _run("--port", str(free_port()), "--engine-factory", "kern_serve.adapter:open_fake",
             "--capacity", "8")
    assert r.returncode == 2 and "--capacity must be at least 16" in r.stderr
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
