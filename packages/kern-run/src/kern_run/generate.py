"""The generation loop: prefill chunks → decode of the last prompt token → one greedy decode
per generated token, until EOS or the step limit (docs/caller-contract.md).

It drives any runtime-like object (:class:`RuntimeLike`: ``write``, ``run``, ``read``,
``synchronize``, ``capture``) so that tests can pass a fake that records calls.

Timing (``time.perf_counter``):

- graphs are captured before the clock starts (``capture_s``), so time to first token is not
  a one-off capture; first-use binding of eager calls (and cuBLASLt algorithm choice) is not
  excluded — a warm-up run (as ``kern-run bench`` does) removes it;
- ``prefill_s``: first write → every prefill chunk finished (a synchronize; 0 without chunks);
- ``ttft_s``: first write → first generated token read back;
- decode: from the first token read to the last, over the tokens produced in between.

While the GPU runs the next decode step, the callback handles the previous token (streaming
text costs no decode time unless it is slower than a step)."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .contract import DECODE, NEXT_TOKEN
from .errors import KernRunError
from .inputs import Inputs
from .plan import Call, check_capacity, decode_call, graph_keys, plan_prompt


class RuntimeLike(Protocol):
    def write(self, name: str, array: np.ndarray) -> None: ...
    def run(self, program: str, symbols: dict[str, int], *, graph: bool = True) -> None: ...
    def read(self, name: str, symbols: dict[str, int] | None = None) -> np.ndarray: ...
    def synchronize(self) -> None: ...
    def capture(self, program: str, symbols: dict[str, int]) -> Any: ...


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


def capture_graphs(rt: RuntimeLike, calls: Sequence[Call]) -> float:
    """Capture every graph ``calls`` will replay (decode always, unless all eager); returns
    the seconds it took."""
    t0 = time.perf_counter()
    for program, tokens in graph_keys(list(calls)):
        rt.capture(program, {"tokens": tokens})
    return time.perf_counter() - t0


def generate(rt: RuntimeLike, prompt: Sequence[int], *, steps: int, chunk: int,
             max_tokens: int, eos: Collection[int] = (), eager: bool = False,
             capacity: int | None = None, fixed_context: bool = False,
             vocab: int | None = None,
             on_token: Callable[[int], None] | None = None, capture: bool = True,
             clock: Callable[[], float] = time.perf_counter) -> Result:
    """Greedy generation of at most ``steps`` tokens after ``prompt`` (token ids).

    ``capacity``: positions the KV state holds (prompt + ``steps`` must fit, checked before
    any call); ``fixed_context``: that limit is the manifest's fixed context, not a chosen
    ``--capacity`` (:func:`plan.kv_capacity`). None checks nothing."""
    if steps < 1:
        raise KernRunError(f"--steps must be at least 1 (got {steps})")
    prompt = [int(t) for t in prompt]
    n = len(prompt)
    calls = plan_prompt(n, chunk, max_tokens, eager=eager)
    if capacity is not None:
        check_capacity(n, steps, capacity, fixed=fixed_context)
    inputs = Inputs(max_tokens, vocab)
    eos = frozenset(int(e) for e in eos)
    res = Result(prompt=prompt, tokens=[], stop="steps")
    if capture:
        res.capture_s = capture_graphs(rt, calls + [decode_call(n, eager=eager)])

    def run(call: Call, ids: Sequence[int]) -> None:
        inputs.write(rt, ids, call.pos0)
        rt.run(call.program, call.symbols, graph=call.graph)
        res.calls.append(call)

    def read_token() -> int:
        return int(rt.read(NEXT_TOKEN[0], {"tokens": 1}).reshape(-1)[0])

    t0 = clock()
    *prefill, last = calls
    for c in prefill:
        run(c, prompt[c.pos0:c.pos0 + c.tokens])
    if prefill:
        rt.synchronize()
        res.prefill_s = clock() - t0
    assert last.program == DECODE
    run(last, prompt[-1:])
    tok = read_token()
    t_first = t_last = clock()
    res.ttft_s = t_first - t0
    produced = 1
    pos = n
    while True:
        if tok in eos:
            res.stop, res.eos_token = "eos", tok
            break
        res.tokens.append(tok)
        if produced >= steps:
            res.stop = "steps"
            if on_token is not None:
                on_token(tok)
            break
        run(decode_call(pos, eager=eager), [tok])   # the GPU works on the next step …
        if on_token is not None:
            on_token(tok)                           # … while the caller streams this one
        pos += 1
        tok = read_token()
        t_last = clock()
        produced += 1
    res.decode_s = t_last - t_first
    res.decode_tokens = produced - 1
    return res
