"""Admission, chunked prefill under a token budget, and bucket choice (no device calls).

- Admission is FIFO: the oldest waiting sequence is admitted when the pool has the pages
  of its whole reservation (:func:`.sequence.reserve_tokens`) and fewer than ``max_seqs``
  sequences run; a younger one never overtakes it, so a request that fits an empty pool
  waits at most until the running ones end (each ends within its max_tokens).
- Prefill: a running sequence's prompt tokens 0…n−2, in admission order, in chunks of at
  most ``chunk`` tokens, at most ``max_prefill_tokens`` tokens per engine step; a chunk of
  exactly ``chunk`` tokens replays a graph, a shorter one (the tail, or one cut by the
  budget) runs eager, like :func:`kern_run.chunks.plan_prompt`.
- Decode rows: every running, prefilled sequence with a row left, in admission order; the
  bucket is the smallest ≥ the rows."""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

from ..errors import KernRunError
from .api import EngineConfig
from .pages import PagePool, pages_for
from .sequence import Sequence, reserve_tokens


@dataclass(frozen=True)
class Chunk:
    """One ``prefill`` run: prompt tokens [pos0, pos0 + tokens) of ``seq``."""

    seq: Sequence
    pos0: int
    tokens: int
    graph: bool


class Scheduler:
    def __init__(self, cfg: EngineConfig, pool: PagePool, buckets: tuple[int, ...],
                 chunk: int) -> None:
        self.cfg = cfg
        self.pool = pool
        self.buckets = buckets
        self.chunk = chunk
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []     # admission order

    def admit(self) -> list[Sequence]:
        """Admit waiting sequences, oldest first, while the oldest fits (pages, a row)."""
        out = []
        while self.waiting and len(self.running) < self.cfg.max_seqs:
            seq = self.waiting[0]
            need = pages_for(reserve_tokens(seq.n, seq.req.max_tokens))
            if not self.pool.can_alloc(need):
                break
            self.waiting.popleft()
            seq.assign(self.pool.alloc(need), self.cfg.table_width)
            self.running.append(seq)
            out.append(seq)
        return out

    def prefill_plan(self) -> list[Chunk]:
        """This step's prefill chunks under the budget (``seq.prefilled`` is the caller's to
        advance as it runs them)."""
        budget = self.cfg.max_prefill_tokens
        out = []
        for seq in self.running:
            start, end = seq.prefilled, seq.n - 1
            while start < end and budget > 0:
                count = min(self.chunk, end - start, budget)
                out.append(Chunk(seq, start, count, self.cfg.graphs and count == self.chunk))
                start += count
                budget -= count
            if budget <= 0:
                break
        return out

    def decode_rows(self) -> list[Sequence]:
        return [s for s in self.running if s.wants_row]

    def bucket(self, rows: int) -> int:
        """The smallest bucket holding ``rows`` rows."""
        i = bisect.bisect_left(self.buckets, rows)
        if i == len(self.buckets):
            raise KernRunError(f"{rows} decode rows exceed the largest bucket "
                               f"{self.buckets[-1]} (max_seqs)")
        return self.buckets[i]

    def remove(self, seq: Sequence) -> None:
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
