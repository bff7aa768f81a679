"""Per-request timings and their summary, with vLLM ``bench serve``'s metric definitions.

For one request: TTFT = first generated text received - request sent; ITL = the gaps between
successive received pieces of text (one per token, or fewer when the detokenizer held text
back); E2EL = last piece - sent; TPOT = (E2EL - TTFT) / (output tokens - 1), for requests with
more than one output token (output tokens: the server's ``usage.completion_tokens``).
Across a run: output throughput = all output tokens / the run's duration (first request sent
to last finished); percentiles are numpy's linear ones over the requests (TTFT, TPOT, E2EL)
or over every gap of every request (ITL)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

PERCENTILES = (50, 90, 99)


@dataclass
class Timing:
    sent: float
    first: float | None = None        # first piece of text
    last: float | None = None         # last piece of text (or the end)
    gaps: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0
    error: str | None = None

    def piece(self, t: float) -> None:
        if self.first is None:
            self.first = t
        else:
            self.gaps.append(t - self.last)  # type: ignore[operator]
        self.last = t

    @property
    def ok(self) -> bool:
        return self.error is None and self.first is not None

    @property
    def ttft(self) -> float:
        return self.first - self.sent  # type: ignore[operator]

    @property
    def e2el(self) -> float:
        return self.last - self.sent  # type: ignore[operator]

    @property
    def tpot(self) -> float | None:
        if self.output_tokens < 2:
            return None
        return (self.e2el - self.ttft) / (self.output_tokens - 1)


def _dist(values: list[float]) -> dict[str, float]:
    """Mean, median and the percentiles, in milliseconds (NaN for no values)."""
    if not values:
        return {"mean_ms": float("nan"), **{f"p{p}_ms": float("nan") for p in PERCENTILES}}
    a = np.asarray(values) * 1000
    return {"mean_ms": float(a.mean()),
            **{f"p{p}_ms": float(np.percentile(a, p)) for p in PERCENTILES}}


def summarize(timings: list[Timing], duration: float, concurrency: int) -> dict[str, Any]:
    ok = [t for t in timings if t.ok]
    out_tokens = sum(t.output_tokens for t in ok)
    in_tokens = sum(t.prompt_tokens for t in ok)
    return {
        "concurrency": concurrency,
        "completed": len(ok),
        "failed": len(timings) - len(ok),
        "duration_s": duration,
        "output_tokens": out_tokens,
        "output_tok_s": out_tokens / duration if duration > 0 else 0.0,
        "total_tok_s": (out_tokens + in_tokens) / duration if duration > 0 else 0.0,
        "request_s": len(ok) / duration if duration > 0 else 0.0,
        "ttft": _dist([t.ttft for t in ok]),
        "tpot": _dist([x for x in (t.tpot for t in ok) if x is not None]),
        "itl": _dist([g for t in ok for g in t.gaps]),
        "e2el": _dist([t.e2el for t in ok]),
        "errors": sorted({t.error for t in timings if t.error})[:5],
    }
