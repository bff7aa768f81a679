"""The engine's refusals: a configuration it cannot run, a request that can never run.

A request of n prompt tokens and max_tokens m needs n + m positions (the same rule as the
plain path, :func:`kern_run.chunks.check_capacity`); it is refused when that exceeds

- the model: the position limit L, or 16 x P (a block-table row holds P pages):
  ``context_length_exceeded``;
- the pool: capacity − 16 (page 0 is the pad page): ``pool_too_small``.

Everything else that fits an empty pool waits for pages, never forever (FIFO admission)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kern_manifest.contract import PAGE_TOKENS

from ..chunks import clamp_chunk
from ..errors import KernRunError
from .api import (CONTEXT_LENGTH_EXCEEDED, DUPLICATE_ID, INVALID_PROMPT, INVALID_REQUEST,
                  POOL_TOO_SMALL, EngineConfig, Refused, Request, default_buckets)


def check_config(cfg: EngineConfig) -> tuple[tuple[int, ...], int]:
    """(the buckets, the prefill chunk) of ``cfg``; raises :class:`KernRunError` naming
    every bad field."""
    p = []
    if cfg.capacity % PAGE_TOKENS or cfg.capacity < 2 * PAGE_TOKENS:
        p.append(f"capacity {cfg.capacity}: must be a multiple of {PAGE_TOKENS} and at least "
                 f"{2 * PAGE_TOKENS} (page 0 is the pad page)")
    for name in ("max_seqs", "chunk", "max_prefill_tokens", "max_tokens"):
        if getattr(cfg, name) < 1:
            p.append(f"{name} must be at least 1 (got {getattr(cfg, name)})")
    if cfg.table_pages < 0:
        p.append(f"table_pages must be at least 0 (got {cfg.table_pages}; 0: every page)")
    if cfg.max_seqs > cfg.max_tokens >= 1:
        p.append(f"max_seqs {cfg.max_seqs} exceeds the manifest's tokens.max "
                 f"{cfg.max_tokens}: a batch runs at most tokens.max rows")
    if cfg.vocab is not None and cfg.vocab < 1:
        p.append(f"vocab must be at least 1 (got {cfg.vocab})")
    if cfg.position_limit is not None and cfg.position_limit < 2:
        p.append(f"position_limit must be at least 2 (got {cfg.position_limit})")
    if p:
        raise KernRunError(*p)
    buckets = cfg.buckets if cfg.buckets is not None else default_buckets(cfg.max_seqs)
    b = list(buckets)
    if (not b or b != sorted(set(b)) or b[0] < 1 or b[-1] > cfg.max_tokens
            or b[-1] < cfg.max_seqs):
        raise KernRunError(f"buckets {tuple(b)}: must increase strictly from at least 1 to "
                           f"at least max_seqs {cfg.max_seqs}, at most tokens.max "
                           f"{cfg.max_tokens}")
    return tuple(b), clamp_chunk(cfg.chunk, cfg.max_tokens)


def model_limit(cfg: EngineConfig) -> tuple[int | None, str]:
    """(positions the model can give one sequence, why) apart from the pool; None: no limit."""
    lims = []
    if cfg.position_limit is not None:
        lims.append((cfg.position_limit, f"the model's position limit is {cfg.position_limit}"))
    if cfg.table_pages:
        n = PAGE_TOKENS * cfg.table_pages
        lims.append((n, f"a block-table row holds {cfg.table_pages} pages ({n} positions)"))
    if not lims:
        return None, ""
    return min(lims)


def check_request(req: Request, cfg: EngineConfig, *, live: Mapping[str, object]) -> None:
    """Raise :class:`Refused` if ``req`` can never run (or its id is live)."""
    if req.id in live:
        raise Refused(DUPLICATE_ID, "id", f"request id {req.id!r} is already in the engine")
    n = len(req.prompt)
    if n < 1:
        raise Refused(INVALID_PROMPT, "prompt", "prompt is empty: give at least one token")
    m = req.max_tokens
    if not isinstance(m, int) or isinstance(m, bool) or m < 1:
        raise Refused(INVALID_REQUEST, "max_tokens", f"max_tokens must be at least 1 (got {m!r})")
    hi = cfg.vocab
    for i, t in enumerate(req.prompt):
        if not isinstance(t, (int, np.integer)) or t < 0 or (hi is not None and t >= hi):
            vocab = f" (0…{hi - 1})" if hi is not None else ""
            raise Refused(INVALID_PROMPT, "prompt", f"prompt token {i} is {t!r}, outside the "
                          f"model's vocabulary{vocab}")
    need = n + m
    lim, why = model_limit(cfg)
    if lim is not None and need > lim:
        raise Refused(CONTEXT_LENGTH_EXCEEDED, _param(n, lim),
                      f"a prompt of {n} tokens plus max_tokens {m} needs {need} positions; "
                      f"{why}: {_advice(n, lim)}")
    pool = cfg.capacity - PAGE_TOKENS
    if need > pool:
        raise Refused(POOL_TOO_SMALL, _param(n, pool),
                      f"a prompt of {n} tokens plus max_tokens {m} needs {need} KV slots; the "
                      f"pool holds {pool} for one sequence (capacity {cfg.capacity} less the "
                      f"pad page): {_advice(n, pool)}")


def _param(n: int, limit: int) -> str:
    """The field to blame: the prompt if even one generated token does not fit."""
    return "prompt" if n + 1 > limit else "max_tokens"


def _advice(n: int, limit: int) -> str:
    if n + 1 > limit:
        return f"shorten the prompt to at most {limit - 1} tokens"
    return f"lower max_tokens to at most {limit - n}"
