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
                    gpu_bytes=gpu)


def step_timing(built: Built, before: Any, after: Any) -> tuple[int, float | None]:
    """(bucket, host seconds) of the step between two ``stats()``; (0, None) when the
    engine's stats do not say."""
    return _stat_delta(before, after)


def _stat_delta(before: Any, after: Any) -> tuple[int, float | None]:
    b = getattr(after, "last_bucket", 0) or 0
    h = getattr(after, "last_host_s", None)
    return int(b), h


def open_gpu(spec: EngineSpec) -> Built:
    """The GPU path: kern-run's model options (the bundled SmolLM2 by default) through
    ``open_engine``."""
    from kern_run.engine import open_engine
    eng = open_engine(manifest=spec.manifest, kernels=spec.kernels, weights=spec.weights,
                      tokenizer=spec.tokenizer, gpu=spec.gpu, capacity=spec.capacity,
                      max_seqs=spec.max_seqs, chunk=spec.chunk,
                      max_prefill_tokens=spec.max_prefill_tokens, graphs=spec.graphs,
                      eos=frozenset(spec.eos))
    return _built_from(eng, spec)


def _built_from(eng: Any, spec: EngineSpec) -> Built:
    cfg = eng.cfg
    s = eng.stats()
    return Built(engine=eng, model=getattr(eng, "model", "model"), vocab=cfg.vocab,
                 context=cfg.position_limit or cfg.capacity, max_tokens=cfg.max_tokens,
                 pages_total=s.pages_total, page_tokens=16, pool_bytes=0,
                 max_seqs=cfg.max_seqs, buckets=list(cfg.buckets or []))


def open_fake(spec: EngineSpec) -> Built:
    """The Engine over issue 20's fake paged runtime (numpy, no GPU): the CPU tests'."""
    raise KernRunError("the fake engine factory needs kern_run.engine.fake (issue 20)")
