"""The engine: many sequences over one paged KV pool, one decode/batch run per step.

One :meth:`Engine.step`:

1. admit waiting sequences (FIFO, whole reservation of pages up front);
2. queue this step's prefill chunks (under ``max_prefill_tokens``);
3. one decode run over every prefilled running sequence (one row each; bucket 1 runs
   ``decode``, a larger bucket ``batch``; pad rows: token 0, position 0, slot 0, kv_len 1,
   a zero table row: they write and read only the pad page, their tokens are ignored).

Pipelining (like :func:`kern_run.generate.generate`, one step deep): if the rows of the
step to queue are the rows of the step in flight, in the same order, and no prefill touched
the shared inputs since, the new step's ``token_ids`` are copied on the device from the
step in flight's ``next_token`` and only positions/slots/kv_lens come from the host; the new
step is queued *before* the host waits for the one in flight. Otherwise (a finish, an abort,
an admission, a prefill) the engine drains: it waits for the step in flight, takes its
tokens, and writes every input of the new step from the host, block-table rows included.

A row reaching max_tokens is known on the host, so it never gets a step past it; an EOS or
stop id read one step late wastes the row's queued step, whose KV write lies in the
sequence's own reservation. Freed pages may be handed out while that step is in flight:
all work is on one stream, so the new owner's writes land after it."""

from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import dataclass, replace

from kern_manifest import KernError
from kern_manifest.contract import BATCH, DECODE, NEXT_TOKEN, PREFILL, SYMBOL, TOKEN_IDS

from .api import (FINISH_ABORT, FINISH_ERROR, EngineConfig, EngineStats, Request, TokenEvent)
from .batchio import BatchInputs
from .checks import check_config, check_request
from .pages import PageError, PagePool, pages_for
from .scheduler import Chunk, Scheduler
from .sequence import FINISHED, RUNNING, WAITING, Sequence

#: Step times kept per bucket for the median.
TIMES_KEPT = 4096


@dataclass
class _InFlight:
    rows: list[Sequence]
    bucket: int
    read: object                  # PendingLike
    queued_at: float
    fed: bool                     # its token_ids came from the previous step on the device


class Engine:
    """See the module doc. ``rt``: a :class:`kern_run.generate.RuntimeLike` with the
    contract's paged inputs and programs ``prefill``, ``decode``, ``batch``."""

    def __init__(self, rt, cfg: EngineConfig) -> None:
        self.buckets, self.chunk = check_config(cfg)
        self.rt, self.cfg = rt, cfg
        self.pool = PagePool(cfg.pages)
        self.sched = Scheduler(cfg, self.pool, self.buckets, self.chunk)
        self.io = BatchInputs(max(self.buckets[-1], self.chunk), cfg.table_width)
        self.error: BaseException | None = None      # the last runtime failure
        self._live: dict[str, Sequence] = {}         # id -> not yet ended (or end unreported)
        self._events: list[TokenEvent] = []          # ends known outside a step (aborts)
        self._flight: _InFlight | None = None
        self._dirty = True                           # shared inputs not this engine's rows
        self._captured: set[tuple[str, int]] = set()
        self._order = 0
        self._times: dict[int, deque[float]] = {}
        self._last_read = 0.0
        self._st = EngineStats(pages_total=self.pool.total)
        self._host_s = 0.0

    # -- the caller's side --------------------------------------------------------------
    def submit(self, req: Request) -> None:
        """Queue ``req`` (waiting), or raise :class:`~.api.Refused` if it can never run."""
        check_request(req, self.cfg, live=self._live)
        seq = Sequence(req, self._order)
        self._order += 1
        self._live[req.id] = seq
        self.sched.waiting.append(seq)

    def abort(self, id: str) -> None:
        """End ``id`` now (its pages freed); its ``finish="abort"`` event comes out of the
        next :meth:`step`. An unknown or ended id is a no-op."""
        seq = self._live.get(id)
        if seq is None or seq.finish is not None:
            return
        seq.finish = FINISH_ABORT
        self._end(seq)
        self._events.append(TokenEvent(id, None, FINISH_ABORT))

    def has_work(self) -> bool:
        return bool(self._live or self._events or self._flight)

    def step(self) -> list[TokenEvent]:
        """One iteration (see the module doc); returns the events that became known."""
        t0 = time.perf_counter()
        waited = 0.0
        events, self._events = self._events, []
        for ev in events:
            self._live.pop(ev.id, None)
        try:
            self.sched.admit()
            for c in self.sched.prefill_plan():
                self._prefill(c)
            waited = self._decode(events)
        except PageError:
            raise                       # the engine's own bookkeeping: a bug, not the device
        except KernError as err:
            events += self._fail(err)
        if events or self._flight is not None:        # an idle call is not a step
            self._st.steps += 1
            self._host_s += time.perf_counter() - t0 - waited
        return events

    def stats(self) -> EngineStats:
        """A snapshot (the caller may keep or change it)."""
        st = self._st
        return replace(
            st, running=len(self.sched.running), waiting=len(self.sched.waiting),
            pages_reserved=self.pool.held_count,
            pages_used=sum(pages_for(s.written) for s in self.sched.running),
            step_ms={b: 1000 * statistics.median(v) for b, v in sorted(self._times.items())},
            step_counts=dict(sorted(st.step_counts.items())),
            host_ms_per_step=1000 * self._host_s / st.steps if st.steps else 0.0)

    def warmup(self) -> float:
        """Capture every graph the engine can replay (each bucket's decode/batch, the full
        prefill chunk) now rather than at first use; returns the milliseconds it took."""
        before = self._st.capture_ms
        if self.cfg.graphs:
            for b in self.buckets:
                self._capture(DECODE if b == 1 else BATCH, b)
            self._capture(PREFILL, self.chunk)
        return self._st.capture_ms - before

    def close(self) -> None:
        """Close the runtime (if it has ``close``)."""
        close = getattr(self.rt, "close", None)
        if close is not None:
            close()

    # -- the device side ----------------------------------------------------------------
    def _capture(self, program: str, tokens: int) -> None:
        if (program, tokens) in self._captured:
            return
        t0 = time.perf_counter()
        self.rt.capture(program, {SYMBOL: tokens})
        self._st.capture_ms += 1000 * (time.perf_counter() - t0)
        self._captured.add((program, tokens))

    def _prefill(self, c: Chunk) -> None:
        if c.graph:
            self._capture(PREFILL, c.tokens)
        self.io.write_prefill(self.rt, c.seq, c.pos0, c.tokens)
        self.rt.run(PREFILL, {SYMBOL: c.tokens}, graph=c.graph)
        c.seq.prefilled = c.pos0 + c.tokens
        self._st.prefill_chunks += 1
        self._dirty = True

    def _decode(self, events: list[TokenEvent]) -> float:
        """Queue this step's decode run and take the tokens of the one in flight (appended
        to ``events``); returns the seconds spent waiting on the device."""
        rows = self.sched.decode_rows()
        old = self._flight
        if old is not None and not self._dirty and rows == old.rows:
            self._queue(rows, fed=True)                 # the GPU gets the next step …
            return self._take(old, events)              # … while the host reads this one
        waited = 0.0
        if old is not None:
            self._flight = None
            waited = self._take(old, events)
            rows = self.sched.decode_rows()
        if rows:
            self._queue(rows, fed=False)
        return waited

    def _queue(self, rows: list[Sequence], *, fed: bool) -> None:
        b = self.sched.bucket(len(rows))
        program = DECODE if b == 1 else BATCH
        if self.cfg.graphs:
            self._capture(program, b)
        if fed:
            self.rt.copy(TOKEN_IDS, NEXT_TOKEN, {SYMBOL: len(rows)})
            self.io.write_fed(self.rt, rows, b, pos0=program == DECODE)
        else:
            self.io.write_all(self.rt, rows, b)
            self._dirty = False
            self._st.drains += 1
        for s in rows:
            s.queued += 1
        t = time.perf_counter()
        self.rt.run(program, {SYMBOL: b}, graph=self.cfg.graphs)
        read = self.rt.read_async(NEXT_TOKEN, {SYMBOL: b})
        self._flight = _InFlight(list(rows), b, read, t, fed)
        self._st.decode_steps += 1
        self._st.step_counts[b] = self._st.step_counts.get(b, 0) + 1

    def _take(self, fl: _InFlight, events: list[TokenEvent]) -> float:
        """Wait for step ``fl`` and hand each row its token; returns the seconds waited."""
        t0 = time.perf_counter()
        got = fl.read.wait().reshape(-1)            # type: ignore[attr-defined]
        t1 = time.perf_counter()
        # a fed step's time is read-to-read (the GPU ran it back to back with the previous)
        start = self._last_read if fl.fed else fl.queued_at
        self._times.setdefault(fl.bucket, deque(maxlen=TIMES_KEPT)).append(t1 - start)
        self._last_read = t1
        for i, seq in enumerate(fl.rows):
            ev = seq.take(int(got[i]), self.cfg.eos)
            if ev is not None:
                events.append(ev)
                if ev.finish is not None:
                    self._end(seq)
                    self._live.pop(seq.id, None)
        return t1 - t0

    def _end(self, seq: Sequence) -> None:
        """Free ``seq``'s pages and drop it from the schedule (its finish is set)."""
        if seq.state == RUNNING:
            self.pool.free(seq.pages)
            seq.pages = []
        if seq.state in (RUNNING, WAITING):
            self.sched.remove(seq)
        seq.state = FINISHED

    def _fail(self, err: BaseException) -> list[TokenEvent]:
        """The runtime failed mid-step: every running sequence ends with "error" (waiting
        ones stay); the next step rewrites every input."""
        self.error = err
        self._flight = None
        self._dirty = True
        out = []
        for seq in list(self.sched.running):
            seq.finish = FINISH_ERROR
            self._end(seq)
            self._live.pop(seq.id, None)
            out.append(TokenEvent(seq.id, None, FINISH_ERROR))
        return out
