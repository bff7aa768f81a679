"""The generation loop: prefill chunks → decode of the last prompt token → one greedy decode
per generated token, until EOS or the step limit (docs/caller-contract.md).

It drives any runtime-like object (:class:`RuntimeLike`: ``write``, ``copy``, ``run``,
``read_async``, ``synchronize``, ``capture``) so that tests can pass a fake that records calls.

Timing (``time.perf_counter``):

- graphs are captured before the clock starts (``capture_s``), so time to first token is not
  a one-off capture; first-use binding of eager calls (and cuBLASLt algorithm choice) is not
  excluded — a warm-up run (as ``kern-run bench`` does) removes it;
- ``prefill_s``: first write → every prefill chunk finished (a synchronize; 0 without chunks);
- ``ttft_s``: first write → first generated token read back;
- decode: from the first token read to the last, over the tokens produced in between.

Decode is pipelined one step deep: each step's input token is copied on the device from the
previous step's ``next_token``, so step k+1 is queued before token k is read back. The host's
work per token (input writes, launch, read, detokenizing and streaming in the callback) thus
overlaps the GPU's step and costs no decode time unless it is slower than a step."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from kern_manifest.contract import DECODE, NEXT_TOKEN, SYMBOL

from .errors import KernRunError
from .fed import MailboxFeed, feed_for, queue_fed_step
from .inputs import Inputs, table_pages_of
from .chunks import Call, check_capacity, decode_call, graph_keys, plan_prompt

#: The decode call's symbols.
ONE = {SYMBOL: 1}


class PendingLike(Protocol):
    def wait(self) -> np.ndarray: ...


class RuntimeLike(Protocol):
    def write(self, name: str, array: np.ndarray) -> None: ...
    def copy(self, dst: str, src: str, symbols: dict[str, int] | None = None, *,
             dst_row: int = 0) -> None: ...
    def write_scalars(self, values: dict[str, int]) -> None: ...
    def run(self, program: str, symbols: dict[str, int], *, graph: bool = True) -> None: ...
    def read_async(self, name: str, symbols: dict[str, int] | None = None) -> PendingLike: ...
    def synchronize(self) -> None: ...
    def capture(self, program: str, symbols: dict[str, int]) -> Any: ...
    def run_sequence(self, ops: Sequence[Any], *, graph: bool = True) -> None: ...
    def capture_sequence(self, ops: Sequence[Any]) -> Any: ...


@dataclass
class Result:
    prompt: list[int]
    tokens: list[int]                 # generated tokens, EOS excluded
    stop: str                         # "eos" | "steps"
    eos_token: int | None = None      # the EOS id that stopped generation
    calls: list[Call] = field(default_factory=list)  # every run, in order
    capture_s: float = 0.0
    prefill_s: float = 0.0
    ttft_s: float = 0.0
    decode_s: float = 0.0             # first token read → last token read
    decode_tokens: int = 0            # tokens produced in that window

    @property
    def produced(self) -> int:
        """Tokens the model produced, EOS included."""
        return len(self.tokens) + (self.eos_token is not None)

    @property
    def decode_ms_per_token(self) -> float | None:
        return 1000 * self.decode_s / self.decode_tokens if self.decode_tokens else None

    @property
    def tokens_per_s(self) -> float | None:
        return self.decode_tokens / self.decode_s if self.decode_tokens and self.decode_s else None

    @property
    def prefill_tokens(self) -> int:
        return max(0, len(self.prompt) - 1)

    @property
    def prefill_tokens_per_s(self) -> float | None:
        return self.prefill_tokens / self.prefill_s if self.prefill_tokens and self.prefill_s else None


def capture_graphs(rt: RuntimeLike, calls: Sequence[Call],
                   feed: MailboxFeed | None = None) -> float:
    """Capture every graph ``calls`` will replay (decode always, unless all eager) and the
    ``feed``'s sequences; returns the seconds it took."""
    t0 = time.perf_counter()
    for program, tokens in graph_keys(list(calls)):
        rt.capture(program, {SYMBOL: tokens})
    if feed is not None:
        feed.capture()
    return time.perf_counter() - t0


def run_prompt(rt: RuntimeLike, inputs: Inputs, calls: Sequence[Call], prompt: Sequence[int],
               res: Result, clock: Callable[[], float],
               overlap: Callable[[], None] | None = None) -> float:
    """Queue the prompt's calls (:func:`plan_prompt`: prefill chunks, then the last prompt
    token's decode, which makes the first generated token); set ``res.prefill_s`` and record
    the calls. ``overlap``: host work run while the prefill is queued. Returns the clock's
    start (the first write)."""
    def run(call: Call, ids: Sequence[int]) -> None:
        inputs.write(rt, ids, call.pos0)
        rt.run(call.program, call.symbols, graph=call.graph)
        res.calls.append(call)

    t0 = clock()
    *prefill, last = calls
    for c in prefill:
        run(c, prompt[c.pos0:c.pos0 + c.tokens])
    if overlap is not None:
        overlap()
    if prefill:
        rt.synchronize()
        res.prefill_s = clock() - t0
    assert last.program == DECODE
    run(last, prompt[-1:])
    return t0


def generate(rt: RuntimeLike, prompt: Sequence[int], *, steps: int, chunk: int,
             max_tokens: int, eos: Collection[int] = (), eager: bool = False,
             capacity: int | None = None, fixed_context: bool = False,
             vocab: int | None = None, table_pages: int | None = None,
             on_token: Callable[[int], None] | None = None, capture: bool = True,
             mailboxes: bool = True,
             clock: Callable[[], float] = time.perf_counter) -> Result:
    """Greedy generation of at most ``steps`` tokens after ``prompt`` (token ids).

    ``capacity``: positions the KV state holds (prompt + ``steps`` must fit, checked before
    any call); ``fixed_context``: that limit is the manifest's fixed context, not a chosen
    ``--capacity`` (:func:`kern_run.capacity.choose`). None checks nothing.
    ``table_pages``: the block table's pages per row (``ContractInfo.table_pages``; None:
    :func:`~kern_run.inputs.table_pages_of` the runtime). ``mailboxes`` (default): fed steps as
    one sequence graph each through the runtime's mailboxes (:mod:`kern_run.fed`), where the
    runtime has them; False: a token copy, the positions and a read queued between the
    graphs (the A/B of ``kern-run bench``)."""
    if steps < 1:
        raise KernRunError(f"--steps must be at least 1 (got {steps})")
    prompt = [int(t) for t in prompt]
    n = len(prompt)
    calls = plan_prompt(n, chunk, max_tokens, eager=eager)
    if capacity is not None:
        check_capacity(n, steps, capacity, fixed=fixed_context)
    inputs = Inputs(max_tokens, vocab, table_pages=table_pages or table_pages_of(rt),
                    capacity=None if fixed_context else capacity)
    eos = frozenset(int(e) for e in eos)
    res = Result(prompt=prompt, tokens=[], stop="steps")
    # Fed steps: a token copy, the positions and a read, each queued between the graphs; or
    # (``mailboxes``, where the runtime has them) one sequence graph each (kern_run.fed).
    feed = feed_for(rt, mailboxes)
    if capture:
        res.capture_s = capture_graphs(rt, calls + [decode_call(n, eager=eager)],
                                       None if eager else feed)
    t0 = run_prompt(rt, inputs, calls, prompt, res, clock)
    # Decode steps take their input token from the previous step's `next_token` on the device
    # (Inputs.write_fed), so the host queues step k+1 before it waits for token k and never
    # stands between two steps. Queued tokens never exceed `steps`; a step queued before an
    # EOS arrives is wasted work, not a wrong token (its KV row lies past the sequence).
    reads = deque([rt.read_async(NEXT_TOKEN, ONE)])
    queued = 1                        # decode calls queued, each makes one token

    def queue_fed() -> None:
        nonlocal queued
        call = decode_call(n + queued - 1, eager=eager)
        reads.append(queue_fed_step(rt, feed, inputs, call))
        res.calls.append(call)
        queued += 1

    produced = 0
    t_first = t_last = 0.0
    while True:
        if queued < steps:
            queue_fed()                               # the GPU works on the next step …
        tok = int(reads.popleft().wait().reshape(-1)[0])
        produced += 1
        if produced == 1:
            t_first = t_last = clock()
            res.ttft_s = t_first - t0
        else:
            t_last = clock()
        if tok in eos:
            res.stop, res.eos_token = "eos", tok
            break
        res.tokens.append(tok)
        if on_token is not None:
            on_token(tok)                             # … while the caller streams this one
        if produced >= steps:
            res.stop = "steps"
            break
    res.decode_s = t_last - t_first
    res.decode_tokens = produced - 1
    return res
