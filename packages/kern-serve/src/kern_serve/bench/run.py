"""``run_bench``: start the server, load it, stop it; build the engine here, load it; plain
decode (see the package doc)."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from kern_run.errors import KernRunError

from . import BenchOptions, Report, check, prompts_for
from .load import through_engine, through_server
from .stats import summarize

READY_S = 900.0   # model load, weight export on first use, graph capture


def run_bench(o: BenchOptions) -> Report:
    from ..server import check as check_serve
    check(o)
    check_serve(o.serve)
    data: dict[str, Any] = {"input_len": o.input_len, "output_len": o.output_len,
                            "levels": [{"concurrency": c} for c in o.levels]}
    if o.url is None:
        with _Server(o.serve) as srv:
            _server_levels(o, srv.base, srv.info, data)
    else:
        import httpx
        info = httpx.get(o.url.rstrip("/").removesuffix("/v1") + "/health", timeout=10).json()
        _server_levels(o, o.url.rstrip("/"), info, data)
    if o.engine:
        _engine_levels(o, data)
    for lvl in data["levels"]:
        for side in ("server", "engine"):
            if side in lvl:
                lvl[side] = _clean(lvl[side])
    return Report(data)


def _count(o: BenchOptions, c: int) -> int:
    return max(o.requests, 8 * c)


def _server_levels(o: BenchOptions, base: str, info: dict[str, Any], data: dict) -> None:
    data["model"] = info.get("model", "?")
    prompts = prompts_for(o, int(info.get("vocab") or 32000))
    for lvl in data["levels"]:
        c = lvl["concurrency"]
        asyncio.run(through_server(base, data["model"], prompts[:1], o.output_len, 1, 1,
                                   o.max_seconds))           # warm-up, not measured
        timings, secs = asyncio.run(through_server(base, data["model"], prompts, o.output_len,
                                                   c, _count(o, c), o.max_seconds))
        lvl["server"] = summarize(timings, secs, c)


def _engine_levels(o: BenchOptions, data: dict) -> None:
    from kern_run.tokenizer import load_tokenizer

    from ..adapter import build
    from ..server import spec_of, tokenizer_path
    tok = load_tokenizer(tokenizer_path(o.serve))
    built = build(spec_of(o.serve, tok.eos_ids))
    data.setdefault("model", built.model)
    prompts = prompts_for(o, built.vocab or 32000)
    try:
        for lvl in data["levels"]:
            c = lvl["concurrency"]
            through_engine(built.engine, prompts[:1], o.output_len, 1, 1, o.max_seconds, "w")
            timings, secs = through_engine(built.engine, prompts, o.output_len, c,
                                           _count(o, c), o.max_seconds)
            lvl["engine"] = summarize(timings, secs, c)
        data["plain_decode_ms_per_token"] = _plain(built, prompts[0], o.output_len, data)
    finally:
        if built.close is not None:
            built.close()


def _plain(built, prompt: list[int], steps: int, data: dict) -> float | None:
    """Plain batch-1 ``kern-run`` decode ms/token on the engine's runtime (after the engine
    runs: the plain path rewrites the inputs the engine's step in flight would reuse)."""
    from kern_run.generate import generate
    eng = built.engine
    cfg = eng.cfg
    try:
        r = generate(eng.rt, prompt, steps=steps, chunk=cfg.chunk, max_tokens=cfg.max_tokens,
                     vocab=cfg.vocab, capacity=cfg.capacity - 16)
    except Exception as err:  # e.g. a runtime without the plain path (the fake's paged mode)
        data["plain_error"] = f"{type(err).__name__}: {err}"[:200]
        return None
    return r.decode_ms_per_token


def _clean(v: Any) -> Any:
    """NaN -> None (JSON has no NaN)."""
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return None if isinstance(v, float) and v != v else v


class _Server:
    """kern-serve with the bench's model options on a free loopback port."""

    def __init__(self, serve) -> None:
        self.serve = serve

    def __enter__(self) -> "_Server":
        import httpx
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.base = f"http://127.0.0.1:{port}/v1"
        self.proc = subprocess.Popen([sys.executable, "-m", "kern_serve.cli", "--port",
                                      str(port), *_argv(self.serve)])
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise KernRunError(f"kern-serve exited {self.proc.returncode} before it was "
                                   f"ready (its message is above)")
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                if r.status_code == 200:
                    self.info = r.json()
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.__exit__()
        raise KernRunError(f"kern-serve not ready after {READY_S:.0f} s")

    def __exit__(self, *_: Any) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _argv(s) -> list[str]:
    out = ["--max-seqs", str(s.max_seqs), "--chunk", str(s.chunk), "--max-prefill-tokens",
           str(s.max_prefill_tokens), "--gpu", str(s.gpu), "--engine-factory", s.engine_factory,
           "--max-queue", str(max(s.max_queue, 1024))]
    for name in ("manifest", "kernels", "tokenizer", "capacity"):
        v = getattr(s, name)
        if v is not None:
            out += [f"--{name}", str(v)]
    for w in s.weights:
        out += ["--weights", str(w)]
    for k, v in s.engine_options.items():
        out += ["--engine-option", f"{k}={v}"]
    if s.eager:
        out.append("--eager")
    return out
