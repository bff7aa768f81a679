"""Chunk planning: which prompt tokens go to which ``prefill`` chunk, and the ``decode`` call
that yields the first generated token (docs/caller-contract.md).

A prompt of n tokens: tokens 0…n−2 run ``prefill`` in chunks of at most ``chunk`` (clamped to
the manifest's ``tokens.max``), positions equal to their indices; token n−1 runs ``decode``
at position n−1. Full chunks replay a CUDA graph (one per distinct ``tokens`` value); the
shorter tail chunk runs eager, so that an odd prompt length captures no graph of its own;
decode replays its graph. ``eager`` turns every graph off."""

from __future__ import annotations

from dataclasses import dataclass

from kern_manifest.contract import DECODE, PREFILL, SYMBOL

from .errors import KernRunError


@dataclass(frozen=True)
class Call:
    """One ``Runtime.run``: ``program`` on prompt/sequence tokens ``[pos0, pos0 + tokens)``."""

    program: str
    pos0: int
    tokens: int
    graph: bool

    @property
    def positions(self) -> range:
        return range(self.pos0, self.pos0 + self.tokens)

    @property
    def symbols(self) -> dict[str, int]:
        return {SYMBOL: self.tokens}


def clamp_chunk(chunk: int, max_tokens: int) -> int:
    """The chunk size actually used: ``chunk`` clamped to ``tokens.max``; ``chunk`` < 1 is an
    error naming the option."""
    if chunk < 1:
        raise KernRunError(f"--chunk must be at least 1 (got {chunk})")
    if max_tokens < 1:
        raise KernRunError(f"the manifest's `tokens.max` is {max_tokens}; it must be at least 1")
    return min(chunk, max_tokens)


def plan_prompt(n: int, chunk: int, max_tokens: int, *, eager: bool = False) -> list[Call]:
    """The calls for a prompt of ``n`` tokens: prefill chunks, then one decode."""
    if n < 1:
        raise KernRunError("the prompt encodes to no tokens; give at least one token")
    size = clamp_chunk(chunk, max_tokens)
    calls: list[Call] = []
    start = 0
    while start < n - 1:
        count = min(size, n - 1 - start)
        calls.append(Call(PREFILL, start, count, graph=not eager and count == size))
        start += count
    calls.append(decode_call(n - 1, eager=eager))
    return calls


def decode_call(pos: int, *, eager: bool = False) -> Call:
    """The ``decode`` call for the token at position ``pos``."""
    return Call(DECODE, pos, 1, graph=not eager)


def graph_keys(calls: list[Call]) -> list[tuple[str, int]]:
    """Distinct (program, tokens) that ``calls`` replay as graphs, in first-use order (to
    capture them before timing starts)."""
    keys: list[tuple[str, int]] = []
    for c in calls:
        k = (c.program, c.tokens)
        if c.graph and k not in keys:
            keys.append(k)
    return keys


def check_capacity(n: int, steps: int, capacity: int, *, fixed: bool = False) -> None:
    """The KV state holds ``capacity`` tokens: the prompt and every generated token.
    ``fixed``: the limit is the manifest's context (a fixed state), not ``--capacity``."""
    if n + steps <= capacity:
        return
    if fixed:
        raise KernRunError(f"a prompt of {n} tokens plus --steps {steps} needs {n + steps} "
                           f"positions; this model's context is {capacity} (its KV state is "
                           f"fixed by the manifest: `tokens.max`): shorten the prompt or lower "
                           f"--steps to at most {max(capacity - n, 0)}")
    raise KernRunError(f"--capacity {capacity} is too small for a prompt of {n} tokens plus "
                       f"--steps {steps}: it needs at least {n + steps}")
