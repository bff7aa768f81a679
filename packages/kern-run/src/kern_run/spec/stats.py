"""What a speculative run measures, beside :class:`~kern_run.generate.Result`'s timing.

A *round* is one ``verify`` call; the plain decode steps the loop falls back to (no n-gram
match, or no room for a draft) are counted apart. Times come from the loop's clock:

- ``round_s``: per round, from the first input write to the predictions on the host (writes,
  launch, the GPU's verify, the readback);
- ``host_s``: per round, from the predictions on the host to the return of the next launch
  (accept, emit, index update, the next proposal, input writes, the graph launch): the time
  the GPU waits on the host between a round and what follows it.

``speedup`` compares ms/token over the same window (:attr:`Result.decode_ms_per_token`: first
token read → last token read) of a plain and a speculative run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class SpecStats:
    k: int = 0                          # drafts per round asked for (rounds may use fewer)
    ngram: tuple[int, int] | None = None
    rounds: int = 0                     # verify calls
    round_tokens: int = 0               # tokens the rounds emitted (EOS included)
    drafted: list[int] = field(default_factory=list)   # [i]: rounds with a draft at i
    accepted: list[int] = field(default_factory=list)  # [i]: rounds that accepted draft i
    decode_steps: int = 0               # plain decode steps whose token was used (the first
                                        # token excluded: it always comes from decode)
    fallbacks: int = 0                  # switches from rounds back to plain decode
    round_s: float = 0.0
    host_s: float = 0.0
    host_gaps: int = 0                  # round ends whose host time is in host_s
    widths: list[int] = field(default_factory=list)    # verify `tokens` values captured
    round_log: list[int] = field(default_factory=list)  # tokens each round emitted, in order

    def record(self, drafts: int, accepted: int, tokens: int, span_s: float) -> None:
        """One round over ``drafts`` drafts of which ``accepted`` were accepted and
        ``tokens`` emitted (fewer than accepted + 1 when a stop fell inside the round)."""
        if len(self.drafted) < drafts:
            grow = drafts - len(self.drafted)
            self.drafted += [0] * grow
            self.accepted += [0] * grow
        for i in range(drafts):
            self.drafted[i] += 1
        for i in range(accepted):
            self.accepted[i] += 1
        self.rounds += 1
        self.round_tokens += tokens
        self.round_log.append(tokens)
        self.round_s += span_s

    def anchors(self, first: int) -> list[int]:
        """Each round's anchor position when the first generated token sits at ``first`` and
        the rounds of :attr:`round_log` follow it in order (plain steps only at the tail, as in
        the DSpark loop): a round's anchor is the last token the rounds before it emitted."""
        out, pos = [], first
        for t in self.round_log:
            out.append(pos)
            pos += t
        return out

    @property
    def tau(self) -> float | None:
        """Tokens per round (accepted drafts + 1, averaged over rounds)."""
        return self.round_tokens / self.rounds if self.rounds else None

    @property
    def acceptance(self) -> list[float]:
        """Per draft position i: the fraction of the rounds that drafted i which accepted it
        (accepting i implies accepting every draft before it)."""
        return [a / d for a, d in zip(self.accepted, self.drafted) if d]

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted drafts / drafted tokens, over all rounds."""
        d = sum(self.drafted)
        return sum(self.accepted) / d if d else None

    @property
    def ms_per_round(self) -> float | None:
        return 1000 * self.round_s / self.rounds if self.rounds else None

    @property
    def host_us_per_round(self) -> float | None:
        return 1e6 * self.host_s / self.host_gaps if self.host_gaps else None

    def as_dict(self) -> dict:
        return {"k": self.k, "ngram": list(self.ngram) if self.ngram else None,
                "rounds": self.rounds, "round_tokens": self.round_tokens, "tau": self.tau,
                "acceptance": self.acceptance, "acceptance_rate": self.acceptance_rate,
                "decode_steps": self.decode_steps, "fallbacks": self.fallbacks,
                "ms_per_round": self.ms_per_round,
                "host_us_per_round": self.host_us_per_round, "widths": list(self.widths)}

    def lines(self) -> list[str]:
        """A human summary (one item a line)."""
        def f(x: float | None, fmt: str) -> str:
            return "–" if x is None else format(x, fmt)
        acc = " ".join(f"{a:.2f}" for a in self.acceptance) or "–"
        return [f"rounds {self.rounds} (k {self.k}), τ {f(self.tau, '.2f')} tokens/round, "
                f"{self.decode_steps} plain decode steps, {self.fallbacks} fallbacks",
                f"acceptance {f(self.acceptance_rate, '.2f')}; per draft position: {acc}",
                f"{f(self.ms_per_round, '.3f')} ms/round, host "
                f"{f(self.host_us_per_round, '.1f')} µs/round"]


def speedup(plain_ms_per_token: float | None, spec_ms_per_token: float | None) -> float | None:
    """Plain ms/token over speculative ms/token (> 1: speculation is faster)."""
    if not plain_ms_per_token or not spec_ms_per_token:
        return None
    return plain_ms_per_token / spec_ms_per_token


def repetition_loop(tokens: Sequence[int], *, min_span: int = 32, max_period: int = 32) -> bool:
    """Whether ``tokens`` contain a repetition loop: a span of at least ``min_span`` tokens
    that repeats with some period P ≤ ``max_period`` (every token equals the one P before it)
    and holds at least two periods. Prompt lookup accepts everything in a loop, so loops
    inflate τ; the bench reports τ also over the outputs without one."""
    a = np.asarray(tokens, dtype=np.int64)
    for p in range(1, max_period + 1):
        need = max(min_span, 2 * p) - p     # consecutive i with a[i] == a[i − p]
        if len(a) - p < need:
            break
        eq = a[p:] == a[:-p]
        # longest run of True
        run = best = 0
        for v in eq.tolist():
            run = run + 1 if v else 0
            best = max(best, run)
        if best >= need:
            return True
    return False
