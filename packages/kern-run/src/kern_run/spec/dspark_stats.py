"""What a DSpark run measures (``kern-run --spec dspark``), beside
:class:`~kern_run.spec.stats.SpecStats`' counts (rounds, τ, drafted/accepted per position).

Per-position acceptance, for draft position k (0-based; ``d_k`` proposes the token k + 1
after the anchor):

- ``acceptance`` (inherited): accepted k / rounds that drafted k — unconditional;
- ``conditional``: accepted k / rounds that drafted k *and* accepted k − 1 (every round for
  k = 0) — the draft's quality at depth k given a correct prefix.

The round's time split, host clocks (``time.perf_counter``) around the two synchronising
reads of a round; the three spans tile the round, so they add up to ``round_s``:

- ``draft_s``: from the start of the round (the draft's input writes) to ``draft_tokens`` on
  the host: input writes, the launch, the GPU's remaining work from the previous round (its
  ``draft_precompute``, queued without a wait) and the ``draft`` itself, the readback; the
  previous round's tokens are streamed (``on_token``) while the GPU works;
- ``verify_s``: from ``draft_tokens`` on the host to ``predictions`` on the host: verify's
  input writes, launch, GPU time, readback;
- ``host_s``: from ``predictions`` on the host to the return of the ``draft_precompute``
  launch: accept, emit, bookkeeping, the launch (its GPU time is in the next ``draft_s``).

Pipelined rounds (``pipelined``, :mod:`.dspark_pipeline`) queue the next round before they
wait: ``draft_s`` is then that queueing, ``verify_s`` the wait for this round's outputs,
``host_s`` accept and emit; ``queued_ahead`` counts the rounds queued so, ``dropped`` those
computed after a stop and not used.

Chained rounds (``chained``, the default loop without in-graph acceptance: verify is queued
behind the draft and both are read at once) have one synchronising read, so the same two fields mean: ``draft_s`` the
queueing (both programs' input writes and launches, the device copy of the drafts),
``verify_s`` the wait for both on the GPU and the readback; with ``ahead`` (the precompute of
all verified rows queued behind verify, :mod:`.dspark`) the queueing includes that launch and
``host_s`` is accept and emit alone.

With GPU events (a runtime offering ``timing_event``, see :mod:`.dspark`), ``gpu_*_ms`` hold
the GPU time of each program alone, summed over rounds; None without them."""

from __future__ import annotations

from dataclasses import dataclass, field

from .stats import SpecStats


@dataclass
class DSparkStats(SpecStats):
    block: int = 0                      # the draft's B (dspark.json)
    reached: list[int] = field(default_factory=list)   # [k]: rounds that drafted k with
                                                       # drafts 0 … k−1 accepted
    draft_s: float = 0.0
    verify_s: float = 0.0
    gpu_draft_ms: float | None = None
    gpu_verify_ms: float | None = None
    gpu_precompute_ms: float | None = None
    gpu_rounds: int = 0                 # rounds whose draft/verify GPU times are summed
    gpu_precomputes: int = 0            # precomputes (after a round) whose GPU time is summed
    tail_reason: str | None = None      # why the run ended in plain decode steps, if it did
    chained: bool = False               # verify queued behind the draft (module docstring)
    ahead: bool = False                 # chained, and the precompute queued behind verify
    pipelined: bool = False             # rounds queued one ahead (:mod:`.dspark_pipeline`)
    queued_ahead: int = 0               # rounds queued before the previous one was read
    dropped: int = 0                    # of those, rounds dropped (a stop came first)

    def record(self, drafts: int, accepted: int, tokens: int, span_s: float) -> None:
        super().record(drafts, accepted, tokens, span_s)
        while len(self.reached) < drafts:
            self.reached.append(0)
        for k in range(min(drafts - 1, accepted) + 1):
            self.reached[k] += 1

    def split(self, draft_s: float, verify_s: float, host_s: float) -> None:
        """One round's host-clock split (module docstring)."""
        self.draft_s += draft_s
        self.verify_s += verify_s
        self.host_s += host_s
        self.host_gaps += 1

    def gpu(self, draft_ms: float, verify_ms: float) -> None:
        """One round's GPU times of ``draft`` and ``verify``."""
        self.gpu_draft_ms = (self.gpu_draft_ms or 0.0) + draft_ms
        self.gpu_verify_ms = (self.gpu_verify_ms or 0.0) + verify_ms
        self.gpu_rounds += 1

    def gpu_precompute(self, ms: float) -> None:
        """The GPU time of one round's ``draft_precompute`` (the last round runs none)."""
        self.gpu_precompute_ms = (self.gpu_precompute_ms or 0.0) + ms
        self.gpu_precomputes += 1

    @property
    def conditional(self) -> list[float]:
        return [a / r for a, r in zip(self.accepted, self.reached) if r]

    def per_round_ms(self, seconds: float) -> float | None:
        return 1000 * seconds / self.rounds if self.rounds else None

    def as_dict(self) -> dict:
        d = super().as_dict()
        def per(ms: float | None, n: int) -> float | None:
            return ms / n if ms is not None and n else None
        d.update({"drafter": "dspark", "block": self.block, "conditional": self.conditional,
                  "draft_ms_per_round": self.per_round_ms(self.draft_s),
                  "verify_ms_per_round": self.per_round_ms(self.verify_s),
                  "gpu_draft_ms_per_round": per(self.gpu_draft_ms, self.gpu_rounds),
                  "gpu_verify_ms_per_round": per(self.gpu_verify_ms, self.gpu_rounds),
                  "gpu_precompute_ms_per_round": per(self.gpu_precompute_ms,
                                                     self.gpu_precomputes),
                  "tail_reason": self.tail_reason, "chained": self.chained,
                  "ahead": self.ahead, "pipelined": self.pipelined,
                  "queued_ahead": self.queued_ahead, "dropped": self.dropped})
        return d

    def split_line(self, f) -> str:
        """The host-clock split of a round in words (chained or not: module docstring)."""
        d, v = self.per_round_ms(self.draft_s), self.per_round_ms(self.verify_s)
        h = f(self.per_round_ms(self.host_s), '.3f')
        if self.pipelined:
            return (f"round {f(self.ms_per_round, '.3f')} ms = queue {f(d, '.3f')} (the next "
                    f"round launched: {self.queued_ahead} of {self.rounds} rounds queued "
                    f"ahead, {self.dropped} dropped at the stop) + wait {f(v, '.3f')} (for "
                    f"this round on the GPU) + host {h} ms (accept, emit)")
        if self.ahead:
            return (f"round {f(self.ms_per_round, '.3f')} ms = queue {f(d, '.3f')} (draft, "
                    f"verify and the precompute of its rows launched) + wait {f(v, '.3f')} "
                    f"(on the GPU, incl. the previous precompute) + host {h} ms "
                    f"(accept, emit)")
        if self.chained:
            return (f"round {f(self.ms_per_round, '.3f')} ms = queue {f(d, '.3f')} (draft "
                    f"and verify launched, verify behind the draft) + wait {f(v, '.3f')} "
                    f"(both on the GPU, incl. the previous precompute) + host {h} ms "
                    f"(accept, emit, precompute launch)")
        return (f"round {f(self.ms_per_round, '.3f')} ms = draft {f(d, '.3f')} (incl. the "
                f"previous precompute's GPU time) + verify {f(v, '.3f')} + host {h} ms "
                f"(accept, emit, precompute launch)")

    def lines(self) -> list[str]:
        def f(x: float | None, fmt: str) -> str:
            return "–" if x is None else format(x, fmt)
        acc = " ".join(f"{a:.2f}" for a in self.conditional) or "–"
        unc = " ".join(f"{a:.2f}" for a in self.acceptance) or "–"
        tail = f" ({self.tail_reason})" if self.tail_reason else ""
        out = [f"DSpark: {self.rounds} rounds (block {self.block}, ≤ {self.k} drafts), τ "
               f"{f(self.tau, '.2f')} tokens/round, {self.decode_steps} plain decode "
               f"steps{tail}",
               f"acceptance per draft position given the previous accepted: {acc}; "
               f"unconditional: {unc}",
               self.split_line(f)]
        if self.gpu_rounds:
            g = self.as_dict()
            out.append(f"GPU per round: draft {f(g['gpu_draft_ms_per_round'], '.3f')}, "
                       f"verify {f(g['gpu_verify_ms_per_round'], '.3f')}, precompute "
                       f"{f(g['gpu_precompute_ms_per_round'], '.3f')} ms")
        return out
