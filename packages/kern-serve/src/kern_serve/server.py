"""``kern-serve``: options -> the API process (uvicorn) with its engine process.

Start-up: the options and (for the GPU factory) the model's files are checked first, the
tokenizer is loaded, then uvicorn listens at once (``/health`` answers 503 while the engine
process loads) and the engine process is spawned. When it is ready, one line is printed::

    kern-serve: SmolLM2-135M-Instruct at http://127.0.0.1:8000/v1 · KV pool 512 pages × 16
    tokens (8,192 tokens, 0.19 GB) · buckets 1,2,4,…,64 · graph capture 812 ms · engine pid 4242

Exit: SIGTERM (or Ctrl-C) stops accepting, drains the requests in flight, stops the engine
process and exits 0; the engine process dying (or failing to start) fails the requests in
flight, shuts the server down and exits non-zero (its status: 1, or 2 for bad input).
"""

from __future__ import annotations

import signal
import sys
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kern_run.errors import KernRunError

from .adapter import DEFAULT_FACTORY
from .protocol import EngineSpec, Ready, Steps


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str | None = None
    api_key: str | None = None
    max_seqs: int = 64
    chunk: int = 512
    max_prefill_tokens: int = 2048
    capacity: int | None = None
    max_queue: int = 256
    manifest: Path | None = None
    kernels: Path | None = None
    weights: list[Path] = field(default_factory=list)
    tokenizer: Path | None = None
    gpu: int = 0
    eager: bool = False
    engine_factory: str = DEFAULT_FACTORY
    engine_options: dict[str, str] = field(default_factory=dict)


def check(o: ServeOptions) -> None:
    problems = []
    for name, v, least in (("--port", o.port, 0), ("--max-seqs", o.max_seqs, 1),
                           ("--chunk", o.chunk, 1), ("--max-prefill-tokens",
                                                      o.max_prefill_tokens, 1),
                           ("--max-queue", o.max_queue, 0), ("--gpu", o.gpu, 0)):
        if v < least:
            problems.append(f"{name} must be at least {least} (got {v})")
    if o.port > 65535:
        problems.append(f"--port {o.port} is not a TCP port (0 … 65535)")
    if o.capacity is not None and o.capacity < 16:
        problems.append(f"--capacity must be at least 16 tokens (got {o.capacity})")
    if o.api_key is not None and not o.api_key:
        problems.append("--api-key is empty")
    if problems:
        raise KernRunError(*problems)


def tokenizer_path(o: ServeOptions) -> Path:
    """The tokenizer the API process loads: --tokenizer, else the bundled model's GGUF."""
    if o.tokenizer is not None:
        if not o.tokenizer.exists():
            raise KernRunError(f"--tokenizer `{o.tokenizer}`: no such file or directory")
        return o.tokenizer
    from kern_run.defaults import gguf_path
    return gguf_path()


def check_model(o: ServeOptions) -> None:
    """kern-run's checks of the model options that need no GPU (files, manifest contract)."""
    from kern_run.runner import RunOptions, read_contract, resolve_model
    model = resolve_model(RunOptions(manifest=o.manifest, kernels=o.kernels,
                                     weights=list(o.weights), tokenizer=o.tokenizer))
    read_contract(model.manifest)


def spec_of(o: ServeOptions, eos: frozenset[int]) -> EngineSpec:
    return EngineSpec(factory=o.engine_factory,
                      manifest=str(o.manifest) if o.manifest else None,
                      kernels=str(o.kernels) if o.kernels else None,
                      weights=[str(w) for w in o.weights],
                      tokenizer=str(o.tokenizer) if o.tokenizer else None, gpu=o.gpu,
                      capacity=o.capacity, max_seqs=o.max_seqs, chunk=o.chunk,
                      max_prefill_tokens=o.max_prefill_tokens, graphs=not o.eager,
                      eos=sorted(eos), options=dict(o.engine_options))


def startup_line(r: Ready, name: str, url: str) -> str:
    kv = f"{r.pool_bytes / 1e9:.2f} GB" if r.pool_bytes >= 1e8 else f"{r.pool_bytes / 1e6:.1f} MB"
    buckets = ",".join(map(str, r.buckets)) or "none"
    return (f"kern-serve: {name} at {url}/v1 · KV pool {r.pages_total:,} pages × "
            f"{r.page_tokens} tokens ({r.pages_total * r.page_tokens:,} tokens, {kv}) · "
            f"context {r.context:,} · max {r.max_seqs} sequences · buckets {buckets} · graph "
            f"capture {1000 * r.capture_s:.0f} ms · engine pid {r.pid}")


def serve(o: ServeOptions) -> int:
    """Run the server until SIGTERM or an engine failure; the exit status."""
    import uvicorn

    from kern_run.tokenizer import load_tokenizer

    from .api import Settings, make_app
    from .client import EngineClient
    from .metrics import Metrics
    from .service import Service

    check(o)
    if o.engine_factory == DEFAULT_FACTORY:
        check_model(o)
    tok = load_tokenizer(tokenizer_path(o))
    state = {"exit": 0, "server": None}
    name = o.served_model_name

    def on_failure(code: int, message: str) -> None:
        sys.stderr.write(f"kern-serve: the engine failed: {message}\n")
        state["exit"] = code or 1
        if state["server"] is not None:
            state["server"].should_exit = True

    def on_ready(r: Ready) -> None:
        settings.model = name or r.model
        svc.model = settings.model
        metrics.info.labels(model=settings.model).set(1)
        sys.stderr.write(startup_line(r, settings.model, _url(state["server"], o)) + "\n")
        sys.stderr.flush()

    def on_steps(msg) -> None:
        if isinstance(msg, Steps):
            metrics.observe_steps(msg.step_s, msg.bucket)
        else:
            metrics.observe_snapshot(msg)

    metrics = Metrics()
    client = EngineClient(spec_of(o, tok.eos_ids), on_failure, on_ready, on_steps)
    svc = Service(client, tok, metrics, name or "")
    settings = Settings(model=name or "", api_key=o.api_key, max_queue=o.max_queue)

    @asynccontextmanager
    async def lifespan(_app):
        await client.start()
        yield
        await client.stop()

    app = make_app(svc, settings, lifespan)
    config = uvicorn.Config(app, host=o.host, port=o.port, log_level="warning",
                            access_log=False, lifespan="on", http="httptools", loop=_loop(),
                            timeout_graceful_shutdown=None, backlog=2048, timeout_keep_alive=30)
    server = uvicorn.Server(config)
    state["server"] = server
    # uvicorn drains on SIGTERM/SIGINT and then re-raises the signal to the handler that was
    # installed before it: a no-op one here, so that a drained server exits 0, not by signal
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM,
                                                                   signal.SIGINT)}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not server.started and state["exit"] == 0:
        return 1   # uvicorn could not bind (it printed why)
    return int(state["exit"])


def _loop() -> str:
    try:
        import uvloop  # noqa: F401
        return "uvloop"
    except ImportError:
        return "asyncio"


def _url(server, o: ServeOptions) -> str:
    port = o.port
    try:
        port = server.servers[0].sockets[0].getsockname()[1]
    except (AttributeError, IndexError, TypeError):
        pass
    return f"http://{o.host}:{port}"
