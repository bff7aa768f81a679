"""The DSpark speculative loop (docs/dspark.md "The caller loop"; greedy, lossless).

1. Prompt ``t_0 … t_{n−1}``: ``prefill`` chunks of ``t_0 … t_{n−2}``, each followed by
   ``draft_precompute`` over the same rows (``draft_precompute_prefill``, its many-row
   twin, where the manifest has it); then ``decode_spec`` of ``t_{n−1}`` at n − 1 (its
   ``next_token`` is the first generated token) and ``draft_precompute`` of that row.
2. A round at anchor ``a`` (the last emitted token, not yet in either KV state), position p:
   ``draft`` (B rows ``[a, mask × (B−1)]`` at p … p+B−1, every row ``kv_lens`` = p + B) →
   read ``draft_tokens`` → ``verify [a, d_0 … d_{m−1}]`` at p … p+m → read ``predictions`` →
   accept the longest prefix j → emit ``predictions[0 … j]`` → ``draft_precompute`` with
   tokens = j + 1 (``ahead``: m + 1, queued behind verify) → the new anchor
   ``predictions[j]`` at p + j + 1.
3. m = min(k, the steps left − 1); a round is drafted only while the draft's slots
   p … p+B−1 lie below the capacity, and while at least one draft fits the steps; otherwise
   the run finishes with plain pipelined ``decode`` steps (as :func:`~kern_run.generate.
   generate`'s), which need neither the carry nor the draft KV.

``draft_precompute`` reads ``positions`` / ``slots`` of its rows; they are still in the input
buffers: the tapped call just before it (a prefill chunk, ``decode_spec``, or the round's
``verify``, whose first j + 1 rows are p … p+j) wrote them, so the precompute is a launch
and no host write. Rejected rows need no rollback in either state (slot = position: they lie
past the new anchor and are rewritten before any row reads them).

``chain`` (:func:`dspark_generate`, the default: math-code to the first EOS 1.58x → 1.63x
plain on the H200): verify is queued right behind the draft — its inputs but the drafts are
known before the draft runs, and ``draft_tokens[0 … m)`` is copied into ``token_ids[1 … m]``
on the device (``Runtime.copy``'s ``dst_row``); the drafts are read with the predictions.

``ahead`` (with ``chain``; the default): the round's ``draft_precompute`` of all m + 1
verified rows is queued right behind verify, before the host has the predictions (the H200
measured the idle gap it removes at ~0.07 ms a Qwen3-shape round). The rows past the
accepted prefix get rejected tokens' features at p + j + 1 … p + m, inside the next draft's
block, whose layers write their own K/V there before any row reads them, and the next
precompute rewrites them: the draft reads the same K/V as with j + 1 rows (bit for bit: the
precompute's kernels compute each row alone). ``pipeline``: :mod:`.dspark_pipeline`.

Host work per round is kept small: the sequence lives in one preallocated i64 array (the
drafts are written past its end and ``token_ids`` of verify is a slice of it), the draft's
block ids are one preallocated array, symbols dicts are made once, and every graph the run
may replay (draft, each verify width, each precompute width, the prompt's) is captured before
the clock. Stats: :mod:`.dspark_stats`."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np

from kern_manifest.contract import (DECODE_SPEC, DRAFT, DRAFT_PRECOMPUTE,
                                    DRAFT_PRECOMPUTE_PREFILL, DRAFT_TOKENS,
                                    NEXT_TOKEN, PREDICTIONS, PREFILL, TOKEN_IDS, VERIFY,
                                    VERIFY_MAX)
from ..chunks import Call, check_capacity, decode_call, plan_prompt
from ..errors import KernRunError
from ..fed import MailboxFeed, feed_for, queue_fed_step
from ..generate import ONE, RuntimeLike
from ..inputs import Inputs, table_pages_of
from .accept import accept_prefix
from .dspark_capture import capture_dspark
from .dspark_stats import DSparkStats
from .emission import Emission
from .dspark_timing import RoundTimer
from .loop import SpecResult, verify_widths


@dataclass(frozen=True)
class DraftSpec:
    """What the loop needs of the draft (``dspark.json``): the block size B and the mask
    token of block rows 1 … B−1."""

    block: int
    mask_token_id: int


def check_dspark_options(draft: DraftSpec, k: int, max_tokens: int,
                         verify_max: int = VERIFY_MAX) -> None:
    top = min(verify_max, max_tokens)
    problems = []
    if not 1 <= k <= draft.block:
        problems.append(f"--spec-k {k}: the DSpark draft proposes block = {draft.block} tokens "
                        f"per round; use 1 ≤ --spec-k ≤ {draft.block}")
    elif k + 1 > top:
        problems.append(f"--spec-k {k}: a round verifies k + 1 = {k + 1} tokens and `verify` "
                        f"takes at most {top}")
    if draft.block > max_tokens:
        problems.append(f"the draft's block ({draft.block}) is larger than the manifest's "
                        f"`tokens.max` ({max_tokens})")
    if problems:
        raise KernRunError(*problems)


def dspark_generate(rt: RuntimeLike, prompt: Sequence[int], *, steps: int, chunk: int,
                    max_tokens: int, draft: DraftSpec, k: int | None = None,
                    eos: Collection[int] = (), eager: bool = False,
                    capacity: int | None = None, fixed_context: bool = False,
                    vocab: int | None = None, table_pages: int | None = None,
                    on_token: Callable[[int], None] | None = None, capture: bool = True,
                    verify_max: int = VERIFY_MAX, gpu_timer: Callable[[], object] | None = None,
                    clock: Callable[[], float] = time.perf_counter,
                    chain: bool = True, ahead: bool = True,
                    pipeline: bool = False, prefill_precompute: bool = False,
                    round_graph: str = "memcpy", mailboxes: bool = True) -> SpecResult:
    """Greedy generation of at most ``steps`` tokens after ``prompt`` with DSpark rounds of at
    most ``k`` drafts (default: the block B); the tokens equal
    :func:`~kern_run.generate.generate`'s (modulo bf16 near-ties between the multi-row verify
    and the one-row decode). The arguments shared with ``generate`` mean the same;
    ``gpu_timer``: a factory of GPU timing events (:mod:`.dspark_timing`) for the GPU time
    split, None for host clocks only; ``chain``: queue each round's verify behind its draft
    without a host trip (module docstring; False: wait for the drafts, then launch verify);
    ``ahead``: with ``chain``, queue the precompute of every verified row behind verify
    (module docstring; False: j + 1 rows once the predictions are read); ``pipeline``: with
    ``ahead`` and no ``gpu_timer``, queue each round before the previous one is read, its
    inputs copied on the device from verify's in-graph acceptance (:mod:`.dspark_pipeline`;
    the manifest must have it: ``DSparkInfo.accept_mask``); ``prefill_precompute``: the
    prompt's chunks run ``draft_precompute_prefill`` (the manifest has it), else
    ``draft_precompute``; ``round_graph``: a pipelined round fed on the device is one CUDA
    graph (:func:`~kern_run.spec.dspark_pipeline.fed_round`), its copies as memcpy nodes
    (``"memcpy"``) or in the runtime's copy kernel (``"kernel"``); ``"off"``: a graph per
    program; ``mailboxes``: the plain tail's fed steps, as ``generate``'s
    (:mod:`kern_run.fed`)."""
    if steps < 1:
        raise KernRunError(f"--steps must be at least 1 (got {steps})")
    k = draft.block if k is None else k
    check_dspark_options(draft, k, max_tokens, verify_max)
    prompt = [int(t) for t in prompt]
    calls = plan_prompt(len(prompt), chunk, max_tokens, eager=eager)
    if capacity is not None:
        check_capacity(len(prompt), steps, capacity, fixed=fixed_context)
    widths = verify_widths(k, steps) if not eager else []
    ahead = chain and ahead
    pipeline = ahead and pipeline and gpu_timer is None
    stats = DSparkStats(k=k, block=draft.block, widths=widths, chained=chain, ahead=ahead,
                        pipelined=pipeline)
    res = SpecResult(prompt=prompt, tokens=[], stop="steps", spec=stats)
    chunk_pc = DRAFT_PRECOMPUTE_PREFILL if prefill_precompute else DRAFT_PRECOMPUTE
    from .dspark_pipeline import PipelinedLoop, fed_round
    one = fed_round(draft.block, k, round_graph)      # refuses an unknown value
    one = one if pipeline and k + 1 in widths else None
    feed = feed_for(rt, mailboxes) if steps > 1 and not eager else None
    if capture:
        res.capture_s = capture_dspark(rt, calls, draft.block, widths, steps, chunk_pc, one,
                                       feed)
    loop = (PipelinedLoop if pipeline else _DSparkLoop)(rt, res, draft, steps=steps, k=k, eos=frozenset(int(e) for e in eos),
                       eager=eager, capacity=capacity, on_token=on_token, clock=clock,
                       inputs=Inputs(max_tokens, vocab,
                                     table_pages=table_pages or table_pages_of(rt),
                                     capacity=None if fixed_context else capacity),
                       timer=RoundTimer(gpu_timer) if gpu_timer is not None else None,
                       chain=chain, ahead=ahead, chunk_precompute=chunk_pc, feed=feed,
                       **({"fed": one} if pipeline else {}))
    loop.run(calls)
    return res


class _DSparkLoop(Emission):
    """One DSpark run's state and phases (module docstring). ``seq[i]`` is the token at
    position i: the prompt, the emitted tokens, then the current round's drafts."""

    def __init__(self, rt: RuntimeLike, res: SpecResult, draft: DraftSpec, *, steps: int,
                 k: int, eos: frozenset[int], eager: bool, capacity: int | None,
                 on_token: Callable[[int], None] | None, clock: Callable[[], float],
                 inputs: Inputs, timer: RoundTimer | None, chain: bool = False,
                 ahead: bool = False, chunk_precompute: str = DRAFT_PRECOMPUTE,
                 feed: MailboxFeed | None = None) -> None:
        self.rt, self.res, self.stats, self.chain = rt, res, res.spec, chain
        self.ahead = ahead
        self.block, self.steps, self.k, self.eos, self.eager = draft.block, steps, k, eos, eager
        self.capacity, self.on_token, self.clock = capacity, on_token, clock
        self.inputs, self.timer, self.graph = inputs, timer, not eager
        self.n = n = len(res.prompt)
        self.seq = np.zeros(n + steps + max(k, draft.block) + 1, dtype=np.int64)
        self.seq[:n] = res.prompt
        self.block_ids = np.full(draft.block, draft.mask_token_id, dtype=np.int64)
        self.syms = {w: {"tokens": w} for w in range(1, max(k, draft.block) + 2)}
        self.produced = 0                 # tokens emitted (an EOS included once emitted)
        self.stream: list[int] = []       # emitted, not yet passed to on_token
        self.t_first = self.t_last = 0.0
        self.chunk_precompute = chunk_precompute   # the prompt chunks' precompute program
        self.feed = feed                  # the tail's fed steps (None: stream operations)

    # -- bookkeeping ------------------------------------------------------------------------
    def launch(self, program: str, pos0: int, tokens: int, graph: bool) -> None:
        self.rt.run(program, self.syms[tokens] if tokens in self.syms else {"tokens": tokens},
                    graph=graph)
        self.res.calls.append(Call(program, pos0, tokens, graph))

    def room(self) -> int:
        """Drafts the next round may verify (0: no round): ≤ k, the round's m + 1 tokens
        within the steps left, and the draft's slots p … p+B−1 below the capacity."""
        p = self.n + self.produced - 1
        if self.capacity is not None and p + self.block > self.capacity:
            self.stats.tail_reason = (f"the draft's {self.block} slots from position {p} "
                                      f"would pass the capacity {self.capacity}")
            return 0
        return min(self.k, self.steps - self.produced - 1)

    def may_follow(self, p: int) -> bool:
        """Can a round follow the one at p?  False only when none can, whatever it accepts
        (it emits at least one token: the next anchor is at p + 1 or later)."""
        if self.capacity is not None and p + 1 + self.block > self.capacity:
            return False
        return self.steps - self.produced - 2 >= 1

    def precompute(self, p: int, rows: int) -> None:
        """``draft_precompute`` of carry rows 0 … rows−1 (positions p …), timed if asked."""
        if self.timer is not None:
            self.timer.precompute_mark(0)
        self.launch(DRAFT_PRECOMPUTE, p, rows, self.graph)
        if self.timer is not None:
            self.timer.precompute_mark(1)

    # -- the phases -------------------------------------------------------------------------
    def run(self, calls: Sequence[Call]) -> None:
        if not self.prompt(calls):
            self.rounds()
        self.finish()

    def rounds(self) -> None:
        """Rounds while one fits, then the plain tail (:meth:`tail`)."""
        while True:
            m = self.room()
            if m < 1:
                return self.tail()
            if self.round(m):
                return

    def finish(self) -> None:
        self.flush()
        if self.timer is not None:
            self.rt.synchronize()
            self.timer.close(self.stats)
        self.res.decode_s = self.t_last - self.t_first
        self.res.decode_tokens = self.produced - 1

    def prompt(self, calls: Sequence[Call]) -> bool:
        """Step 1 of the loop; True when the first token already stops the run."""
        rt, res, prompt = self.rt, self.res, self.res.prompt
        t0 = self.clock()
        *prefill, last = calls
        for c in prefill:
            self.inputs.write(rt, prompt[c.pos0:c.pos0 + c.tokens], c.pos0)
            self.launch(PREFILL, c.pos0, c.tokens, c.graph)
            self.launch(self.chunk_precompute, c.pos0, c.tokens, c.graph)
        if prefill:
            rt.synchronize()
            res.prefill_s = self.clock() - t0     # the chunks and their precompute
        p = len(prompt) - 1
        self.inputs.write(rt, prompt[-1:], p)
        self.launch(DECODE_SPEC, p, 1, last.graph)
        first = rt.read_async(NEXT_TOKEN, ONE)    # behind decode_spec, before the precompute
        self.launch(DRAFT_PRECOMPUTE, p, 1, last.graph)
        tok = int(first.wait().reshape(-1)[0])
        self.t_first = self.t_last = self.clock()
        res.ttft_s = self.t_first - t0
        return self.emit(tok)

    def round(self, m: int) -> bool:
        """One round verifying m drafts (step 2); True: the run stops."""
        rt, syms, p, B = self.rt, self.syms, self.n + self.produced - 1, self.block
        timer = self.timer
        t_a = self.clock()
        self.queue_draft(p)
        w = m + 1
        queued = False                            # this round's precompute already queued
        if self.chain:
            drafts, preds, t_b, queued = self.chained(p, m)
        else:
            read = rt.read_async(DRAFT_TOKENS, syms[B])
            self.flush()                          # stream the last round's tokens meanwhile
            drafts = read.wait().reshape(-1)[:m].tolist()
            t_b = self.clock()
            if timer is not None:
                timer.previous_precompute(self.stats)
            self.seq[p + 1:p + w] = drafts
            self.queue_verify(p, m)
            preds = rt.read_async(PREDICTIONS, syms[w]).wait().reshape(-1).tolist()
        self.t_last = t_c = self.clock()
        j, stop = self.accept(drafts, preds)
        # carry rows 0 … j: verify's accepted rows (none when no round follows: the plain
        # decode steps that end the run read no draft KV)
        if not queued and not stop and self.room() >= 1:
            self.precompute(p, j + 1)
            queued = True
        t_d = self.clock()
        if timer is not None:
            timer.round(self.stats, precompute=queued)
        self.stats.split(t_b - t_a, t_c - t_b, t_d - t_c)
        self.stats.round_s += t_d - t_a
        return stop

    def queue_draft(self, p: int) -> None:
        """The draft's inputs for the anchor ``seq[p]`` written, and ``draft`` launched."""
        self.block_ids[0] = self.seq[p]
        self.inputs.write(self.rt, self.block_ids, p, kv_len=p + self.block)
        if self.timer is not None:
            self.timer.mark(0)
        self.launch(DRAFT, p, self.block, self.graph)
        if self.timer is not None:
            self.timer.mark(1)

    def queue_chained(self, p: int, m: int) -> tuple[object, object, bool]:
        """Verify queued behind the draft (its inputs written, rows 1 … m of ``token_ids``
        then replaced on the device by the drafts), the reads of both outputs, and with
        ``ahead`` the precompute of all m + 1 rows behind them. (The drafts' pending read,
        the predictions', whether the precompute is queued.)"""
        rt, w = self.rt, m + 1
        self.queue_verify(p, m, drafts_on_device=True)
        read = rt.read_async(DRAFT_TOKENS, self.syms[self.block])
        pred = rt.read_async(PREDICTIONS, self.syms[w])
        queued = self.ahead and self.may_follow(p)
        if queued:
            self.precompute(p, w)
        return read, pred, queued

    def chained(self, p: int, m: int) -> tuple[list[int], list[int], float, bool]:
        """:meth:`queue_chained`, then both outputs read once. (drafts, predictions, the host
        clock once everything is queued, whether the precompute is)."""
        read, pred, queued = self.queue_chained(p, m)
        t_b = self.clock()
        self.flush()                              # stream the last round's tokens meanwhile
        drafts = read.wait().reshape(-1)[:m].tolist()
        preds = pred.wait().reshape(-1).tolist()
        if self.timer is not None:
            self.timer.previous_precompute(self.stats)
        self.seq[p + 1:p + m + 1] = drafts
        return drafts, preds, t_b, queued

    def queue_verify(self, p: int, m: int, drafts_on_device: bool = False) -> None:
        """Verify's inputs (``seq[p … p+m]``) written and verify launched; with
        ``drafts_on_device`` rows 1 … m of ``token_ids`` are then copied from ``draft_tokens``
        on the device (the host's rows there are stale)."""
        self.inputs.write(self.rt, self.seq[p:p + m + 1], p)
        if drafts_on_device:
            self.rt.copy(TOKEN_IDS, DRAFT_TOKENS, self.syms[m], dst_row=1)
        if self.timer is not None:
            self.timer.mark(2)
        self.launch(VERIFY, p, m + 1, self.graph)
        if self.timer is not None:
            self.timer.mark(3)

    def accept(self, drafts: list[int], preds: list[int]) -> tuple[int, bool]:
        """Emit the round in one go: up to the first EOS (dropped, and the run ends), or all
        of it (m ≤ the steps left − 1, so the step limit can only fall on its last token).
        Returns (j, stop)."""
        j = accept_prefix(drafts, preds)
        out = preds[:j + 1]
        cut = next((i for i, tok in enumerate(out) if tok in self.eos), len(out))
        a = self.n + self.produced
        self.seq[a:a + cut] = out[:cut]
        self.res.tokens += out[:cut]
        self.stream += out[:cut]
        self.produced += cut
        self.stats.record(len(drafts), j, cut + (cut < len(out)), 0.0)
        if cut < len(out):
            self.produced += 1
            self.res.stop, self.res.eos_token = "eos", out[cut]
            return j, True
        if self.produced >= self.steps:
            self.res.stop = "steps"
            return j, True
        return j, False

    def tail(self) -> None:
        """Step 3: plain decode to the end, pipelined as ``generate``'s (each step's input is
        the previous step's ``next_token``, copied on the device: through the mailboxes with
        a ``feed``, else by stream operations); the first from the host-known anchor."""
        rt, p = self.rt, self.n + self.produced - 1
        if self.stats.tail_reason is None:
            self.stats.tail_reason = "one step left"
        call = decode_call(p, eager=self.eager)
        self.inputs.write(rt, self.seq[p:p + 1], p)
        self.launch(call.program, p, 1, call.graph)
        pending = deque([rt.read_async(NEXT_TOKEN, ONE)])
        while True:
            queued = self.produced + len(pending)
            if queued < self.steps:
                call = decode_call(self.n + queued - 1, eager=self.eager)
                pending.append(queue_fed_step(rt, self.feed, self.inputs, call))
                self.res.calls.append(call)
            tok = int(pending.popleft().wait().reshape(-1)[0])
            self.t_last = self.clock()
            self.stats.decode_steps += 1
            if self.emit(tok):
                return
            self.flush()
