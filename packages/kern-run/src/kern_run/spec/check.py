"""``--spec-check``: plain greedy and the speculative loop on the same prompt in the same
process, and where they part, how close the plain run's decision was.

Speculation is lossless up to bf16 near-ties: the multi-row ``verify`` and the one-row
``decode`` reduce in different orders, so where the plain run's best two logits are within
rounding of each other the two may pick different tokens. A divergence where the plain run's
top-1/top-2 gap exceeds :data:`BUG_GAP` cannot be rounding: it is a bug.

The plain run reads no logits (a step reads back 8 bytes). The gap is measured afterwards by
a second plain run stopped at the divergence (``steps`` = index + 1): its last decode is the
one that made the diverging token, so the ``logits`` buffer then holds that step's logits."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np

from kern_manifest.contract import LOGITS
from kern_weights.arrays import bf16_to_f32

from ..generate import ONE, Result, RuntimeLike, generate
from .loop import DEFAULT_K, VERIFY_MAX, Proposer, SpecResult, spec_generate
from .ngram import DEFAULT_NGRAM

#: A divergence at a larger plain top-1/top-2 logit gap is flagged as a bug.
BUG_GAP = 0.25


def produced(r: Result) -> list[int]:
    """The tokens a run produced, its EOS included."""
    return r.tokens + ([r.eos_token] if r.eos_token is not None else [])


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ (one ending earlier counts), or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass
class Divergence:
    index: int                   # generated-token index (0: the first generated token)
    plain_token: int | None      # None: that run had stopped
    spec_token: int | None
    top1: int                    # the plain run's argmax there (ties: lowest id)
    top2: int
    gap: float                   # logit[top1] − logit[top2] in the plain run
    spec_gap: float | None       # logit[top1] − logit[spec_token] in the plain run
    replay_token: int            # the plain re-run's token there …
    replay_of: int               # … and the first plain run's (they differ only when the
                                 # plain path is itself not deterministic)
    bug_gap: float = BUG_GAP

    @property
    def bug(self) -> bool:
        return (self.gap > self.bug_gap or self.replay_token != self.replay_of
                or self.plain_token is None or self.spec_token is None)

    def describe(self) -> str:
        what = ("BUG: " if self.bug else "near-tie: ")
        s = (f"{what}first divergence at generated token {self.index}: plain "
             f"{self.plain_token}, spec {self.spec_token}; plain top-1 {self.top1} / top-2 "
             f"{self.top2}, gap {self.gap:.4f} logit")
        if self.spec_gap is not None:
            s += f" (plain logit of the spec token: {self.spec_gap:.4f} below top-1)"
        if self.replay_token != self.replay_of:
            s += (f"; the plain re-run made {self.replay_token} where the plain run made "
                  f"{self.replay_of} (the plain path is not deterministic)")
        if self.plain_token is None or self.spec_token is None:
            s += "; one run stopped where the other went on"
        return s


@dataclass
class CheckReport:
    plain: Result
    spec: SpecResult
    divergence: Divergence | None

    @property
    def identical(self) -> bool:
        return self.divergence is None

    @property
    def bug(self) -> bool:
        return self.divergence is not None and self.divergence.bug

    def describe(self) -> str:
        if self.divergence is None:
            return (f"spec-check: identical to plain greedy over {len(produced(self.plain))} "
                    f"tokens")
        return "spec-check: " + self.divergence.describe()


def logits_f32(arr: np.ndarray) -> np.ndarray:
    """The ``logits`` buffer as float32, one row: the runtime returns bf16 as its raw
    ``uint16`` bits."""
    a = np.asarray(arr)
    if a.dtype == np.uint16:
        a = bf16_to_f32(a)
    return a.reshape(-1).astype(np.float32)


def top2(logits: np.ndarray) -> tuple[int, int, float]:
    """(argmax, runner-up, their gap), ties to the lowest id as the contract's argmax."""
    i1 = int(np.argmax(logits))
    rest = logits.copy()
    rest[i1] = -np.inf
    i2 = int(np.argmax(rest))
    return i1, i2, float(logits[i1] - logits[i2])


def read_logits(rt: RuntimeLike) -> np.ndarray:
    """The last decode's ``logits`` (waits for queued work)."""
    reader = getattr(rt, "read", None)
    if reader is not None:
        return logits_f32(reader(LOGITS, ONE))
    return logits_f32(rt.read_async(LOGITS, ONE).wait())


def spec_check(rt: RuntimeLike, prompt: Sequence[int], *, steps: int, chunk: int,
               max_tokens: int, k: int = DEFAULT_K,
               ngram: tuple[int, int] = DEFAULT_NGRAM, eos: Collection[int] = (),
               eager: bool = False, capacity: int | None = None,
               fixed_context: bool = False, vocab: int | None = None,
               table_pages: int | None = None,
               proposer: Proposer | None = None, verify_max: int = VERIFY_MAX,
               bug_gap: float = BUG_GAP,
               on_token: Callable[[int], None] | None = None,
               speculate: Callable[..., SpecResult] | None = None) -> CheckReport:
    """Plain :func:`generate`, then :func:`spec_generate` (``on_token`` streams the latter)
    on the same runtime and prompt; on a divergence, a third (plain) run to its index reads
    the plain logits there. ``speculate``: another speculative loop taking ``generate``'s
    arguments (e.g. :func:`~kern_run.spec.dspark.dspark_generate` with its draft bound);
    ``k``, ``ngram``, ``proposer`` and ``verify_max`` are then not used."""
    common: dict = dict(steps=steps, chunk=chunk, max_tokens=max_tokens, eos=eos,
                        eager=eager, capacity=capacity, fixed_context=fixed_context,
                        vocab=vocab, table_pages=table_pages)
    plain = generate(rt, prompt, **common)
    if speculate is None:
        spec = spec_generate(rt, prompt, k=k, ngram=ngram, proposer=proposer,
                             verify_max=verify_max, on_token=on_token, **common)
    else:
        spec = speculate(rt, prompt, on_token=on_token, **common)
    a, b = produced(plain), produced(spec)
    i = first_divergence(a, b)
    if i is None:
        return CheckReport(plain, spec, None)
    # With the same steps and EOS set neither run can be a proper prefix of the other (a
    # run stops early only at an EOS, which the other would then have made too); if one is,
    # the logits are read at the shorter run's last token and the report is a bug.
    at = min(i, len(a) - 1)
    replay = generate(rt, prompt, **{**common, "steps": at + 1})
    logits = read_logits(rt)
    t1, t2, gap = top2(logits)
    st = b[i] if i < len(b) else None
    spec_gap = (float(logits[t1] - logits[st]) if st is not None and 0 <= st < len(logits)
                else None)
    div = Divergence(index=i, plain_token=a[i] if i < len(a) else None, spec_token=st,
                     top1=t1, top2=t2, gap=gap, spec_gap=spec_gap,
                     replay_token=produced(replay)[at], replay_of=a[at], bug_gap=bug_gap)
    return CheckReport(plain, spec, div)
