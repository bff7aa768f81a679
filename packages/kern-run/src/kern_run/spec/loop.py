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

from kern_manifest.contract import NEXT_TOKEN, PREDICTIONS, VERIFY
from ..errors import KernRunError
from ..generate import ONE, Result, RuntimeLike, capture_graphs, run_prompt
from ..inputs import Inputs
from ..chunks import Call, check_capacity, decode_call, plan_prompt
from .accept import accept_prefix
from .ngram import DEFAULT_NGRAM, NgramProposer
from .stats import SpecStats

#: The most tokens one ``verify`` takes (its ``tokens`` range: 1 … 16).
VERIFY_MAX = 16
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
                  on_token: Callable[[int], None] | None = None, capture: bool = True,
                  proposer: Proposer | None = None, verify_max: int = VERIFY_MAX,
                  clock: Callable[[], float] = time.perf_counter) -> SpecResult:
    """Greedy generation of at most ``steps`` tokens after ``prompt`` with verify rounds of
    at most ``k`` drafts; the tokens equal :func:`~kern_run.generate.generate`'s (modulo
    bf16 near-ties between the multi-row verify and the one-row decode).

    The arguments shared with ``generate`` mean the same; ``ngram`` (n_min, n_max) configures
    the default :class:`~kern_run.spec.ngram.NgramProposer`, which ``proposer`` replaces.
    ``verify_max``: the largest ``tokens`` the manifest's ``verify`` takes."""
    if steps < 1:
        raise KernRunError(f"--steps must be at least 1 (got {steps})")
    check_spec_options(k, ngram, max_tokens, verify_max)
    prompt = [int(t) for t in prompt]
    n = len(prompt)
    calls = plan_prompt(n, chunk, max_tokens, eager=eager)
    if capacity is not None:
        check_capacity(n, steps, capacity, fixed=fixed_context)
    if proposer is None:
        proposer = NgramProposer(*ngram)
    inputs = Inputs(max_tokens, vocab)
    eos = frozenset(int(e) for e in eos)
    graph = not eager
    widths = verify_widths(k, steps) if graph else []
    stats = SpecStats(k=k, ngram=tuple(ngram) if isinstance(proposer, NgramProposer) else None,
                      widths=widths)
    res = SpecResult(prompt=prompt, tokens=[], stop="steps", spec=stats)
    if capture:
        res.capture_s = capture_graphs(rt, calls)
        t = time.perf_counter()
        for w in widths:
            rt.capture(VERIFY, {"tokens": w})
        res.capture_s += time.perf_counter() - t

    # Host arrays, made once. `seq[i]` is the token at position i (prompt, emitted tokens,
    # then the current round's drafts); a round's anchor sits at ≤ n + steps − 2 and carries
    # ≤ k drafts.
    size = n + steps + k + 1
    seq = np.zeros(size, dtype=np.int64)
    seq[:n] = prompt
    positions = np.arange(size, dtype=np.int64)
    pos0 = np.zeros(1, dtype=np.int32)
    syms = {w: {"tokens": w} for w in range(1, k + 2)}

    produced = 0                      # tokens emitted so far (EOS included once emitted)
    stream: list[int] = []            # emitted, not yet passed to on_token
    t_ready: float | None = None      # the last round's predictions reached the host

    def emit(tok: int) -> bool:
        """Emit one token; True when generation stops (EOS: not kept; or the step limit)."""
        nonlocal produced
        produced += 1
        if tok in eos:
            res.stop, res.eos_token = "eos", tok
            return True
        seq[n + produced - 1] = tok
        res.tokens.append(tok)
        stream.append(tok)
        if produced >= steps:
            res.stop = "steps"
            return True
        return False

    def flush() -> None:
        if on_token is not None:
            for t in stream:
                on_token(t)
        stream.clear()

    def launched() -> None:
        """A call was just launched: the host gap since the last round ends."""
        nonlocal t_ready
        if t_ready is not None:
            stats.host_s += clock() - t_ready
            stats.host_gaps += 1
            t_ready = None

    def room(ahead: int = 0) -> int:
        """Drafts a round may carry once ``ahead`` more tokens are emitted: it emits up to
        m + 1 tokens (≤ the steps left) and writes positions anchor … anchor + m (< capacity;
        the anchor sits at n + produced + ahead − 1)."""
        m = min(k, steps - produced - ahead - 1)
        if capacity is not None:
            m = min(m, capacity - n - produced - ahead)
        return m

    def run(call: Call, ids: Sequence[int]) -> None:
        inputs.write(rt, ids, call.pos0)
        rt.run(call.program, call.symbols, graph=call.graph)
        res.calls.append(call)

    # the proposer indexes the prompt while the prefill is queued
    t0 = run_prompt(rt, inputs, calls, prompt, res, clock,
                    overlap=lambda: proposer.extend(prompt))
    # Plain steps in flight, oldest first: pending[i] makes the token at n + produced + i.
    pending = deque([rt.read_async(NEXT_TOKEN, ONE)])

    def queue_fed() -> None:
        """The next plain step; its input is the last queued step's output, copied on the
        device (Inputs.write_fed)."""
        call = decode_call(n + produced + len(pending) - 1, eager=eager)
        inputs.write_fed(rt, call.pos0)
        rt.run(call.program, call.symbols, graph=call.graph)
        res.calls.append(call)
        pending.append(rt.read_async(NEXT_TOKEN, ONE))

    t_first = t_last = 0.0
    want_round = False                # a match appeared: no further plain step is queued
    while True:
        if pending:
            # -- plain pipelined decode (generate's loop) ------------------------------------
            if not want_round and produced + len(pending) < steps:
                queue_fed()                           # the GPU works on the next step …
            tok = int(pending.popleft().wait().reshape(-1)[0])
            t_last = clock()
            if produced == 0:
                t_first = t_last
                res.ttft_s = t_first - t0
            else:
                stats.decode_steps += 1
            if emit(tok):
                break
            proposer.extend((tok,))
            flush()                                   # … while the caller streams this one
            if pending:
                # A match now means: finish the queued step, then a round from its token.
                if not want_round and proposer.propose(room(len(pending))):
                    want_round = True
                continue
        # -- a verify round from the anchor seq[p] (nothing is queued) -----------------------
        want_round = False
        p = n + produced - 1
        m = room()
        drafts = proposer.propose(m) if m >= 1 else []
        if not drafts:
            # No draft: one plain step from the host-known anchor restarts the pipeline.
            run(decode_call(p, eager=eager), seq[p:p + 1])
            launched()
            pending.append(rt.read_async(NEXT_TOKEN, ONE))
            stats.fallbacks += 1
            flush()
            continue
        m = len(drafts)
        if m > room():
            raise KernRunError(f"the proposer returned {m} drafts; at most {room()} fit")
        if vocab is not None and (max(drafts) >= vocab or min(drafts) < 0):
            raise KernRunError(f"the proposer returned a token outside the model's vocabulary "
                               f"(0…{vocab - 1}): {drafts}")
        w = m + 1
        t_start = clock()
        seq[p + 1:p + w] = drafts
        pos0[0] = p
        rt.write("token_ids", seq[p:p + w])
        rt.write("positions", positions[p:p + w])
        rt.write("pos0", pos0)
        rt.run(VERIFY, syms[w], graph=graph)
        res.calls.append(Call(VERIFY, p, w, graph))
        launched()
        read = rt.read_async(PREDICTIONS, syms[w])
        flush()                                       # stream the previous round's tokens
        preds = read.wait().reshape(-1).tolist()
        t_ready = t_last = clock()
        j = accept_prefix(drafts, preds)
        out = preds[:j + 1]
        # Emit the round in one go: up to the first EOS (dropped, and the run ends), or all
        # of it (m ≤ room(), so the step limit can only be reached at its last token).
        cut = len(out)
        if eos:
            for i, tok in enumerate(out):
                if tok in eos:
                    cut = i
                    break
        keep = out[:cut] if cut < len(out) else out
        a = n + produced
        seq[a:a + cut] = keep
        res.tokens += keep
        stream += keep
        produced += cut
        stats.record(m, j, cut + (cut < len(out)), t_ready - t_start)
        if cut < len(out):
            produced += 1
            res.stop, res.eos_token = "eos", out[cut]
            break
        if produced >= steps:
            res.stop = "steps"
            break
        proposer.extend(out)
    flush()
    res.decode_s = t_last - t_first
    res.decode_tokens = produced - 1
    return res
