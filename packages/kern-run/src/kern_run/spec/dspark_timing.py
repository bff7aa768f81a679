"""GPU time per DSpark program with timing events (optional; :mod:`.dspark`).

A round records six events on the runtime's stream: 0/1 around the ``draft`` launch, 2/3
around ``verify`` (after its input writes), 4/5 or 6/7 (alternate rounds) around
``draft_precompute``: a precompute queued ahead of its round's ``predictions`` read is still
unread when the next round's is queued, so the two pairs take turns. An event pair
brackets exactly one program's work in stream order, so its elapsed time is that program's
GPU time (plus, when the GPU was idle at the first event, the host's launch latency of that
one graph: microseconds). Elapsed times are read only once both events are known complete,
never by an extra wait: draft and verify after the round's ``predictions`` read (queued
behind event 3), the precompute after the next round's ``draft_tokens`` read (queued behind
event 5), or at the end of the run (after a synchronize).

An event is any object with ``record()`` and ``elapsed_ms(start) -> float`` (``close()``
optional): :func:`kern_runtime.timing.timing_event` makes them for a loaded runtime."""

from __future__ import annotations

from collections.abc import Callable

from .dspark_stats import DSparkStats

EVENTS = 8


class RoundTimer:
    def __init__(self, factory: Callable[[], object]) -> None:
        self.events = [factory() for _ in range(EVENTS)]
        self.pending: int | None = None    # first event of a precompute pair not yet read
        self.pair = 4                      # the pair the next precompute records

    def mark(self, i: int) -> None:
        self.events[i].record()  # type: ignore[attr-defined]

    def precompute_mark(self, end: int) -> None:
        """Before (0) and after (1) a round's ``draft_precompute`` launch."""
        self.mark(self.pair + end)

    def _ms(self, end: int, start: int) -> float:
        return float(self.events[end].elapsed_ms(self.events[start]))  # type: ignore[attr-defined]

    def previous_precompute(self, stats: DSparkStats) -> None:
        """After a ``draft_tokens`` read: the previous round's precompute is complete."""
        if self.pending is not None:
            stats.gpu_precompute(self._ms(self.pending + 1, self.pending))
            self.pending = None

    def round(self, stats: DSparkStats, *, precompute: bool) -> None:
        """After a round's ``predictions`` read (and its precompute launch, if any)."""
        stats.gpu(self._ms(1, 0), self._ms(3, 2))
        if precompute:
            self.pending, self.pair = self.pair, 10 - self.pair

    def close(self, stats: DSparkStats) -> None:
        """At the end of the run, after a synchronize: the last precompute, then the events
        are released."""
        self.previous_precompute(stats)
        for e in self.events:
            close = getattr(e, "close", None)
            if close is not None:
                close()
        self.events = []
