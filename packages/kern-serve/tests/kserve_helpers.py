"""Test helpers: a ``kern-serve`` subprocess on 127.0.0.1 over the fake engine, the SmolLM2
tokenizer, and batch-1 reference outputs from the same fake engine in this process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from kern_run.defaults import gguf_path
from kern_run.engine import Engine, EngineConfig, FakePagedRuntime, Request
from kern_run.tokenizer import load_tokenizer

HERE = Path(__file__).parent
FAKE = "kern_serve.adapter:open_fake"
SCRIPTED = "kserve_scripted:make"
START_S = 60.0

_TOK = None


def tokenizer():
    global _TOK
    if _TOK is None:
        _TOK = load_tokenizer(gguf_path())
    return _TOK


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python -m kern_serve.cli`` with ``args``; stderr kept in ``log``."""

    def __init__(self, tmp: Path, *args: str, factory: str = FAKE, wait: bool = True,
                 options: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"kern-serve-{self.port}.log"
        cmd = [sys.executable, "-m", "kern_serve.cli", "--port", str(self.port),
               "--engine-factory", factory, *args]
        for k, v in (options or {}).items():
            cmd += ["--engine-option", f"{k}={v}"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(HERE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        # let the servers' imports be cached as bytecode: each start after the first is faster
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        if wait:
            self.wait_ready()

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self) -> httpx.Response | None:
        try:
            return httpx.get(self.url + "/health", timeout=2)
        except httpx.TransportError:
            return None

    def wait_ready(self, timeout: float = START_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.health()
            if r is not None and r.status_code == 200:
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"kern-serve exited {self.proc.returncode}:\n{self.log}")
            time.sleep(0.05)
        raise AssertionError(f"kern-serve not ready after {timeout} s:\n{self.log}")

    def engine_pid(self) -> int:
        r = self.health()
        assert r is not None
        return int(r.json()["engine_pid"])

    def metrics(self) -> dict[str, float]:
        """Unlabelled samples (and ``name{a="b"}`` for labelled ones) of ``/metrics``."""
        from prometheus_client.parser import text_string_to_metric_families
        out = {}
        for fam in text_string_to_metric_families(httpx.get(self.url + "/metrics").text):
            for s in fam.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
        return out

    def wait_exit(self, timeout: float = 20.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"kern-serve still running after {timeout} s:\n{self.log}")

    def terminate(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def wait_until(cond, timeout: float, what: str, every: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(every)


class Reference:
    """Batch-1 outputs of the fake engine (same vocabulary and EOS as the server's)."""

    def __init__(self, capacity: int = 8192) -> None:
        self.capacity = capacity
        self.cache: dict[tuple, list[int]] = {}

    def tokens(self, prompt: list[int], max_tokens: int, stop_ids=(),
               ignore_eos: bool = False) -> tuple[list[int], str]:
        eos = frozenset(tokenizer().eos_ids)
        cfg = EngineConfig(capacity=self.capacity, max_seqs=1, eos=eos, vocab=49152,
                           position_limit=8192, graphs=False)
        eng = Engine(FakePagedRuntime(self.capacity, max_tokens=2048, vocab=49152), cfg)
        eng.submit(Request("r", tuple(prompt), max_tokens, frozenset(stop_ids), ignore_eos))
        out, finish = [], None
        for _ in range(max_tokens + 100):
            for ev in eng.step():
                if ev.token is not None:
                    out.append(ev.token)
                finish = ev.finish or finish
            if finish is not None:
                return out, finish
        raise AssertionError("the reference engine did not finish")

    def text(self, prompt: list[int], max_tokens: int) -> tuple[str, str]:
        toks, finish = self.tokens(prompt, max_tokens)
        return tokenizer().decode(toks), finish
