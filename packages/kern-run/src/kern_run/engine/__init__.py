"""The engine (issue 20): many sequences over one paged KV pool, continuous batching,
chunked prefill, one CUDA graph per batch bucket, pipelined one step deep
(``docs/engine.md``).

Public API (kern-serve depends on these names): :class:`Request`, :class:`TokenEvent`,
:class:`Refused`, :class:`EngineConfig`, :class:`EngineStats`, :class:`Engine`,
:func:`open_engine`; :class:`FakePagedRuntime` for CPU tests."""

from .api import (FINISH_ABORT, FINISH_ERROR, FINISH_LENGTH, FINISH_STOP, REFUSAL_CODES,
                  EngineConfig, EngineStats, Refused, Request, TokenEvent, default_buckets)
from .engine import Engine
from .fake import FakePagedRuntime
from .open import Opened, open_engine

__all__ = ["FINISH_ABORT", "FINISH_ERROR", "FINISH_LENGTH", "FINISH_STOP", "REFUSAL_CODES",
           "Engine", "EngineConfig", "EngineStats", "FakePagedRuntime", "Opened", "Refused",
           "Request", "TokenEvent", "default_buckets", "open_engine"]
