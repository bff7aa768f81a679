"""The one module of kern-serve that touches issue 20's engine (``kern_run.engine``).

Everything else sees plain data: :class:`Built` (an engine and what the API process is told
about it), the protocol's rows and snapshots. The engine's promised API:

- ``Engine(rt, cfg)``: ``submit(Request)`` (raises ``Refused``, a ``KernRunError`` with
  ``.code`` and ``.param``), ``abort(id)`` (pages free at once; a ``finish="abort"`` event
  on the next step), ``step() -> list[TokenEvent]``, ``has_work()``, ``stats()``;
- ``TokenEvent(id, token, finish, stop_token)``, ``finish`` None while running, else
  ``stop`` (EOS or a stop id: the token is not delivered), ``length``, ``abort``, ``error``;
- ``open_engine(...)``: Runtime + Engine on the GPU from kern-run's model options;
- ``kern_run.engine.fake``: a numpy paged runtime the Engine runs on without a GPU.

An engine *factory* (``--engine-factory module:function``, :func:`build`) takes the
:class:`~kern_serve.protocol.EngineSpec` and returns a :class:`Built`; :func:`open_gpu` is the
default, :func:`open_fake` the CPU one the tests and ``docs/serve.md`` use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kern_run.errors import KernRunError

from .protocol import EngineSpec, Refusal, Snapshot, Submit

DEFAULT_FACTORY = "kern_serve.adapter:open_gpu"
FAKE_FACTORY = "kern_serve.adapter:open_fake"


@dataclass
class Built:
    engine: Any
    model: str                    # the model's label
    vocab: int
    context: int                  # prompt + max_tokens of one sequence
    max_tokens: int
    pages_total: int
    page_tokens: int
    pool_bytes: int
    max_seqs: int
    buckets: list[int] = field(default_factory=list)
    capture_s: float = 0.0
    gpu_bytes: Callable[[], int] | None = None
    close: Callable[[], None] | None = None


def build(spec: EngineSpec) -> Built:
    """Import ``spec.factory`` ("module:function") and call it with the spec."""
    mod, sep, fn = spec.factory.partition(":")
    if not sep or not mod or not fn:
        raise KernRunError(f"--engine-factory `{spec.factory}`: give module:function")
    try:
        factory = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as err:
        raise KernRunError(f"--engine-factory `{spec.factory}`: {err}") from None
    return factory(spec)


def submit(engine: Any, sub: Submit) -> Refusal | None:
    """Submit one request; its refusal as a message (None: accepted)."""
    from kern_run.engine import Request
    req = Request(id=sub.id, prompt=tuple(sub.prompt), max_tokens=sub.max_tokens,
                  stop_token_ids=frozenset(sub.stop_token_ids), ignore_eos=sub.ignore_eos)
    try:
        engine.submit(req)
    except KernRunError as err:
        code = getattr(err, "code", None)
        if code is None:
            raise
        return Refusal(sub.id, str(code), getattr(err, "param", None), str(err))
    return None


def rows(events: list[Any]) -> list[tuple[str, int | None, str | None, int | None]]:
    return [(e.id, e.token, e.finish, e.stop_token) for e in events]


def snapshot(built: Built) -> Snapshot:
    s = built.engine.stats()
    gpu = built.gpu_bytes() if built.gpu_bytes is not None else 0
    return Snapshot(running=s.running, waiting=s.waiting, pages_total=s.pages_total,
                    pages_reserved=s.pages_reserved, pages_used=s.pages_used, steps=s.steps,
                    gpu_bytes=gpu, host_ms_per_step=s.host_ms_per_step,
                    step_ms={int(k): float(v) for k, v in s.step_ms.items()})


def bucket_of(buckets: list[int], rows: int) -> int:
    """The batch bucket a decode step of ``rows`` rows ran in (the engine pads up to the
    smallest bucket that holds them); 0 for a step without decode rows."""
    if rows <= 0:
        return 0
    return next((b for b in buckets if b >= rows), buckets[-1] if buckets else rows)


def context_of(cfg: Any) -> int:
    """Prompt + max_tokens the *model* allows one sequence (the engine's
    ``context_length_exceeded`` rule, ``kern_run.engine.checks``); without a model limit, the
    pool less its pad page. (A request within it that the pool can never hold is the engine's
    ``pool_too_small`` refusal.)"""
    from kern_run.engine.checks import model_limit
    from kern_manifest.contract import PAGE_TOKENS
    lim, _ = model_limit(cfg)
    return cfg.capacity - PAGE_TOKENS if lim is None else lim


def _built(engine: Any, model: str, *, capture_s: float = 0.0, pool_bytes: int = 0,
           gpu_bytes: Callable[[], int] | None = None) -> Built:
    from kern_manifest.contract import PAGE_TOKENS
    from kern_run.engine import default_buckets
    cfg = engine.cfg
    buckets = list(cfg.buckets or default_buckets(cfg.max_seqs))
    context = context_of(cfg)
    return Built(engine=engine, model=model, vocab=cfg.vocab or 0, context=context,
                 max_tokens=context, pages_total=engine.stats().pages_total,
                 page_tokens=PAGE_TOKENS, pool_bytes=pool_bytes, max_seqs=cfg.max_seqs,
                 buckets=buckets, capture_s=capture_s, gpu_bytes=gpu_bytes, close=engine.close)


def open_gpu(spec: EngineSpec) -> Built:
    """The GPU path: kern-run's model options (the bundled SmolLM2 by default) through
    ``open_engine``, every bucket's graph captured up front."""
    from pathlib import Path

    from kern_run.engine import open_engine
    from kern_run.runner import RunOptions
    from kern_runtime import gpu_memory

    def path(p: str | None) -> Path | None:
        return Path(p) if p is not None else None

    opts = RunOptions(manifest=path(spec.manifest), kernels=path(spec.kernels),
                      weights=[Path(w) for w in spec.weights], tokenizer=path(spec.tokenizer),
                      chunk=spec.chunk, capacity=spec.capacity, eager=not spec.graphs,
                      gpu=spec.gpu)
    opened = open_engine(opts, max_seqs=spec.max_seqs, max_prefill_tokens=spec.max_prefill_tokens,
                         graphs=spec.graphs)
    eng = opened.engine
    built = _built(eng, opened.info.model.split()[0] if opened.info.model else "model",
                   pool_bytes=eng.cfg.capacity * opened.info.kv_bytes_per_token,
                   gpu_bytes=_every(1.0, lambda: _used(gpu_memory(spec.gpu))))
    if spec.graphs:
        built.capture_s = eng.warmup() / 1000
    return built


def _used(mem: tuple[int, int]) -> int:
    free, total = mem
    return total - free


def _every(seconds: float, f: Callable[[], int]) -> Callable[[], int]:
    """``f``, called at most once per ``seconds`` (the last value in between): the GPU
    memory query retains the device's context and reads attributes, not for every snapshot."""
    import time
    last = [-seconds, 0]

    def g() -> int:
        now = time.monotonic()
        if now - last[0] >= seconds:
            last[0], last[1] = now, f()
        return int(last[1])
    return g


def open_fake(spec: EngineSpec) -> Built:
    """The Engine over issue 20's fake paged runtime (numpy, no GPU): the CPU tests' engine.

    ``spec.options`` (``--engine-option KEY=VALUE``): ``vocab`` (default 49152, SmolLM2's),
    ``tokens_max`` (the fake manifest's tokens.max, 2048), ``position_limit`` (8192),
    ``load_delay`` (seconds to wait before Ready: to watch ``/health`` say 503),
    ``load_gate`` (a file whose existence ends the loading; at most 60 s),
    ``step_delay`` (seconds added to every step: a slow engine), ``fail_after`` (steps after
    which a step raises: a dying engine loop). ``spec.capacity`` defaults to 8192 tokens."""
    import time

    from kern_run.engine import Engine, EngineConfig, FakePagedRuntime
    o = spec.options
    vocab = int(o.get("vocab", 49152))
    tmax = int(o.get("tokens_max", 2048))
    capacity = (spec.capacity or 8192) // 16 * 16
    rt = FakePagedRuntime(capacity, max_tokens=tmax, vocab=vocab)
    cfg = EngineConfig(capacity=capacity, max_seqs=min(spec.max_seqs, tmax), chunk=spec.chunk,
                       max_prefill_tokens=spec.max_prefill_tokens, eos=frozenset(spec.eos),
                       vocab=vocab, max_tokens=tmax,
                       position_limit=int(o.get("position_limit", 8192)), graphs=spec.graphs)
    engine = Engine(rt, cfg)
    delay, fail_after = float(o.get("step_delay", 0)), int(o.get("fail_after", -1))
    if delay or fail_after >= 0:
        engine = _Slowed(engine, delay, fail_after)
    if spec.graphs:
        engine.warmup()
    time.sleep(float(o.get("load_delay", 0)))
    gate = o.get("load_gate")
    if gate:
        import os
        deadline = time.monotonic() + 60
        while not os.path.exists(gate):
            if time.monotonic() > deadline:
                raise KernRunError(f"load_gate `{gate}`: not there after 60 s")
            time.sleep(0.01)
    return _built(engine, o.get("model", "fake-smollm2"))


class _Slowed:
    """An engine whose steps take ``delay`` longer and fail after ``fail_after`` steps."""

    def __init__(self, engine: Any, delay: float, fail_after: int) -> None:
        self._e, self._delay, self._left = engine, delay, fail_after

    def __getattr__(self, name: str) -> Any:
        return getattr(self._e, name)

    def step(self) -> list[Any]:
        import time
        if self._left == 0:
            raise RuntimeError("the fake engine's step failed (fail_after)")
        self._left -= 1
        if self._delay:
            time.sleep(self._delay)
        return self._e.step()
