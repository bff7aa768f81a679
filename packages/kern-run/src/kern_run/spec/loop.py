"""The speculative generation loop (greedy, lossless): plain decode where no draft is
proposed, verify rounds where one is.

A round at anchor position p (the anchor: the last emitted token, not yet in the KV state)
with drafts ``d0 … d(m−1)`` runs ``verify`` with tokens = m + 1 over ``[anchor, d0 …]`` at
positions p … p+m; it writes the KV state of those positions and returns ``predictions``
(the greedy token after each row). :func:`~kern_run.spec.accept.accept_prefix` keeps j drafts;
the round emits ``predictions[0 … j]`` and the new anchor ``predictions[j]`` sits at
p + j + 1. KV slot = position, so the rejected rows' slots lie past the new anchor and are
rewritten by the next call before any row reads them: rollback is free and nothing past the
accepted position is ever relied on.

Plain steps are :func:`~kern_run.generate.generate`'s pipelined decode: each step's input is
copied on the device from the previous step's ``next_token``, so step i+1 is queued before
token i is read. After each read the proposer is asked; when it has a match, the step already
queued is finished and read (its token is plain output), and the round runs with that token as
anchor. When a round's successor has no draft, one decode of the anchor (written by the host:
``verify`` does not write ``next_token``) restarts the pipeline. On text where lookup never
matches, the loop issues exactly ``generate``'s calls.

Stops hold inside a round: drafts are shortened so a round never emits past ``steps`` (nor
writes past ``capacity``); an EOS among the emitted tokens ends the run there and the tokens
after it are dropped. The first generated token always comes from the prompt's decode.

Host work per round is kept small: the sequence lives in one preallocated i64 array (the
round's drafts are written past its end, so ``token_ids`` is a slice of it), ``positions`` a
slice of a preallocated ``arange``; symbols dicts are made once; tokens of a round are passed to
``on_token`` after the next launch, while the GPU works."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from kern_manifest.contract import NEXT_TOKEN, PREDICTIONS, VERIFY, VERIFY_MAX
from ..errors import KernRunError
from ..fed import MailboxFeed, feed_for, queue_fed_step
from ..generate import ONE, Result, RuntimeLike, capture_graphs, run_prompt
from ..inputs import Inputs, table_pages_of
from ..chunks import Call, check_capacity, decode_call, plan_prompt
from .accept import accept_prefix
from .emission import Emission
from .ngram import DEFAULT_NGRAM, NgramProposer
from .stats import SpecStats

DEFAULT_K = 7


class Proposer(Protocol):
    """A drafter: it sees the prompt and then every emitted token (``extend``, in order) and
    proposes up to ``k`` tokens to follow the sequence so far (``[]``: no proposal)."""

    def extend(self, tokens: Iterable[int]) -> None: ...
    def propose(self, k: int) -> list[int]: ...


@dataclass
class SpecResult(Result):
    spec: SpecStats = field(default_factory=SpecStats)


def verify_widths(k: int, steps: int) -> list[int]:
    """The ``tokens`` values of the rounds a run of ``steps`` tokens with ``k`` drafts may
    issue (captured before the clock): 2 … min(k, steps − 2) + 1. A round has at least one
    draft, never makes the first token, and emits at most the steps left."""
    return list(range(2, min(k, steps - 2) + 2))


def check_spec_options(k: int, ngram: tuple[int, int], max_tokens: int,
                       verify_max: int = VERIFY_MAX) -> None:
    problems = []
    top = min(verify_max, max_tokens)
    if k < 1:
        problems.append(f"--spec-k must be at least 1 (got {k})")
    elif k + 1 > top:
        problems.append(f"--spec-k {k}: a round verifies k + 1 = {k + 1} tokens and `verify` "
                        f"takes at most {top}: use --spec-k ≤ {top - 1}")
    n_min, n_max = ngram
    if not 1 <= n_min <= n_max:
        problems.append(f"the n-gram range must satisfy 1 ≤ min ≤ max (got {n_min}…{n_max})")
    if problems:
        raise KernRunError(*problems)


def spec_generate(rt: RuntimeLike, prompt: Sequence[int], *, steps: int, chunk: int,
                  max_tokens: int, k: int = DEFAULT_K,
                  ngram: tuple[int, int] = DEFAULT_NGRAM, eos: Collection[int] = (),
                  eager: bool = False, capacity: int | None = None,
                  fixed_context: bool = False, vocab: int | None = None,
                  table_pages: int | None = None,
                  on_token: Callable[[int], None] | None = None, capture: bool = True,
                  proposer: Proposer | None = None, verify_max: int = VERIFY_MAX,
                  mailboxes: bool = True,
                  clock: Callable[[], float] = time.perf_counter) -> SpecResult:
    """Greedy generation of at most ``steps`` tokens after ``prompt`` with verify rounds of
    at most ``k`` drafts; the tokens equal :func:`~kern_run.generate.generate`'s (modulo
    bf16 near-ties between the multi-row verify and the one-row decode).

    The arguments shared with ``generate`` mean the same; ``ngram`` (n_min, n_max) configures
    the default :class:`~kern_run.spec.ngram.NgramProposer`, which ``proposer`` replaces.
    ``verify_max``: the largest ``tokens`` the manifest's ``verify`` takes. ``mailboxes``: the
    plain steps' feed, as ``generate``'s (:mod:`kern_run.fed`)."""
    if steps < 1:
        raise KernRunError(f"--steps must be at least 1 (got {steps})")
    check_spec_options(k, ngram, max_tokens, verify_max)
    prompt = [int(t) for t in prompt]
    calls = plan_prompt(len(prompt), chunk, max_tokens, eager=eager)
    if capacity is not None:
        check_capacity(len(prompt), steps, capacity, fixed=fixed_context)
    if proposer is None:
        proposer = NgramProposer(*ngram)
    widths = verify_widths(k, steps) if not eager else []
    stats = SpecStats(k=k, ngram=tuple(ngram) if isinstance(proposer, NgramProposer) else None,
                      widths=widths)
    res = SpecResult(prompt=prompt, tokens=[], stop="steps", spec=stats)
    feed = feed_for(rt, mailboxes)
    if capture:
        res.capture_s = capture_graphs(rt, calls, None if eager else feed)
        t = time.perf_counter()
        for w in widths:
            rt.capture(VERIFY, {"tokens": w})
        res.capture_s += time.perf_counter() - t
    loop = _Loop(rt, res, proposer, steps=steps, k=k, eos=frozenset(int(e) for e in eos),
                 eager=eager, capacity=capacity, vocab=vocab,
                 on_token=on_token, clock=clock, feed=feed,
                 inputs=Inputs(max_tokens, vocab,
                               table_pages=table_pages or table_pages_of(rt),
                               capacity=None if fixed_context else capacity))
    loop.run(calls)
    return res


class _Loop(Emission):
    """One speculative run's state and its phases: the prompt, plain pipelined steps, and
    verify rounds (module docstring). Host arrays are made once: ``seq[i]`` is the token at
    position i (prompt, emitted tokens, then the current round's drafts); a round's anchor
    sits at ≤ n + steps − 2 and carries ≤ k drafts."""

    def __init__(self, rt: RuntimeLike, res: SpecResult, proposer: Proposer, *, steps: int,
                 k: int, eos: frozenset[int], eager: bool, capacity: int | None,
                 vocab: int | None,
                 on_token: Callable[[int], None] | None, clock: Callable[[], float],
                 inputs: Inputs, feed: MailboxFeed | None = None) -> None:
        self.rt, self.res, self.stats, self.proposer = rt, res, res.spec, proposer
        self.steps, self.k, self.eos, self.eager = steps, k, eos, eager
        self.capacity, self.vocab, self.on_token, self.clock = capacity, vocab, on_token, clock
        self.n = n = len(res.prompt)
        self.inputs, self.feed = inputs, feed
        size = n + steps + k + 1
        self.seq = np.zeros(size, dtype=np.int64)
        self.seq[:n] = res.prompt
        self.syms = {w: {"tokens": w} for w in range(1, k + 2)}
        self.produced = 0                 # tokens emitted so far (EOS included once emitted)
        self.stream: list[int] = []       # emitted, not yet passed to on_token
        self.t_ready: float | None = None  # the last round's predictions reached the host
        self.t0 = self.t_first = self.t_last = 0.0
        # Plain steps in flight, oldest first: pending[i] makes the token at n + produced + i.
        self.pending: deque = deque()
        self.want_round = False           # a match appeared: no further plain step is queued

    # -- bookkeeping ------------------------------------------------------------------------
    def launched(self) -> None:
        """A call was just launched: the host gap since the last round ends."""
        if self.t_ready is not None:
            self.stats.host_s += self.clock() - self.t_ready
            self.stats.host_gaps += 1
            self.t_ready = None

    def room(self, ahead: int = 0) -> int:
        """Drafts a round may carry once ``ahead`` more tokens are emitted: it emits up to
        m + 1 tokens (≤ the steps left) and writes positions anchor … anchor + m (< capacity;
        the anchor sits at n + produced + ahead − 1)."""
        m = min(self.k, self.steps - self.produced - ahead - 1)
        if self.capacity is not None:
            m = min(m, self.capacity - self.n - self.produced - ahead)
        return m

    # -- the phases -------------------------------------------------------------------------
    def run(self, calls: Sequence[Call]) -> None:
        res, prompt = self.res, self.res.prompt
        # the proposer indexes the prompt while the prefill is queued
        self.t0 = run_prompt(self.rt, self.inputs, calls, prompt, res, self.clock,
                             overlap=lambda: self.proposer.extend(prompt))
        self.pending.append(self.rt.read_async(NEXT_TOKEN, ONE))
        while not (self.plain_step() if self.pending else self.round()):
            pass
        self.flush()
        res.decode_s = self.t_last - self.t_first
        res.decode_tokens = self.produced - 1

    def queue_fed(self) -> None:
        """The next plain step; its input is the last queued step's output, copied on the
        device: through the mailboxes (``feed``, one sequence graph) or by stream operations
        (Inputs.write_fed)."""
        call = decode_call(self.n + self.produced + len(self.pending) - 1, eager=self.eager)
        self.pending.append(queue_fed_step(self.rt, self.feed, self.inputs, call))
        self.res.calls.append(call)

    def plain_step(self) -> bool:
        """generate's pipelined decode: queue the next step, read the oldest; True: stop."""
        if not self.want_round and self.produced + len(self.pending) < self.steps:
            self.queue_fed()                          # the GPU works on the next step …
        tok = int(self.pending.popleft().wait().reshape(-1)[0])
        self.t_last = self.clock()
        if self.produced == 0:
            self.t_first = self.t_last
            self.res.ttft_s = self.t_first - self.t0
        else:
            self.stats.decode_steps += 1
        if self.emit(tok):
            return True
        self.proposer.extend((tok,))
        self.flush()                                  # … while the caller streams this one
        # A match now means: finish the queued step, then a round from its token.
        if self.pending and not self.want_round and \
                self.proposer.propose(self.room(len(self.pending))):
            self.want_round = True
        return False

    def round(self) -> bool:
        """A verify round from the anchor seq[p] (nothing is queued); True: stop."""
        self.want_round = False
        p = self.n + self.produced - 1
        m = self.room()
        drafts = self.proposer.propose(m) if m >= 1 else []
        if not drafts:
            # No draft: one plain step from the host-known anchor restarts the pipeline.
            call = decode_call(p, eager=self.eager)
            self.inputs.write(self.rt, self.seq[p:p + 1], call.pos0)
            self.rt.run(call.program, call.symbols, graph=call.graph)
            self.res.calls.append(call)
            self.launched()
            self.pending.append(self.rt.read_async(NEXT_TOKEN, ONE))
            self.stats.fallbacks += 1
            self.flush()
            return False
        self.check_drafts(drafts)
        w, t_start = len(drafts) + 1, self.clock()
        self.seq[p + 1:p + w] = drafts
        self.inputs.write(self.rt, self.seq[p:p + w], p)
        self.rt.run(VERIFY, self.syms[w], graph=not self.eager)
        self.res.calls.append(Call(VERIFY, p, w, not self.eager))
        self.launched()
        read = self.rt.read_async(PREDICTIONS, self.syms[w])
        self.flush()                                  # stream the previous round's tokens
        preds = read.wait().reshape(-1).tolist()
        self.t_ready = self.t_last = self.clock()
        return self.accept(drafts, preds, t_start)

    def check_drafts(self, drafts: list[int]) -> None:
        if len(drafts) > self.room():
            raise KernRunError(f"the proposer returned {len(drafts)} drafts; at most "
                               f"{self.room()} fit")
        if self.vocab is not None and (max(drafts) >= self.vocab or min(drafts) < 0):
            raise KernRunError(f"the proposer returned a token outside the model's vocabulary "
                               f"(0…{self.vocab - 1}): {drafts}")

    def accept(self, drafts: list[int], preds: list[int], t_start: float) -> bool:
        """Emit the round in one go: up to the first EOS (dropped, and the run ends), or all
        of it (drafts ≤ room(), so the step limit can only be reached at its last token)."""
        j = accept_prefix(drafts, preds)
        out = preds[:j + 1]
        cut = next((i for i, tok in enumerate(out) if tok in self.eos), len(out))
        keep = out[:cut]
        a = self.n + self.produced
        self.seq[a:a + cut] = keep
        self.res.tokens += keep
        self.stream += keep
        self.produced += cut
        self.stats.record(len(drafts), j, cut + (cut < len(out)), self.t_ready - t_start)
        if cut < len(out):
            self.produced += 1
            self.res.stop, self.res.eos_token = "eos", out[cut]
            return True
        if self.produced >= self.steps:
            self.res.stop = "steps"
            return True
        self.proposer.extend(out)
        return False
