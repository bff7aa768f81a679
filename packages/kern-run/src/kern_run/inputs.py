"""The contract's input buffers for one call, as numpy arrays, and their prefix writes.

For a call on tokens ``ids`` starting at position ``pos0``:

- ``token_ids`` i64 [tokens]: the ids;
- ``positions`` i64 [tokens]: ``pos0, pos0+1, …`` (batch 1: also the KV slots);
- ``pos0`` i32 [1]: ``pos0`` (device memory, so a decode graph captured once stays valid).

The arrays are the first ``tokens`` rows of each buffer; the runtime writes such prefixes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
from kern_manifest.contract import NEXT_TOKEN, POS0, POSITIONS, SYMBOL, TOKEN_IDS

from .errors import KernRunError

I32_MAX = 2**31 - 1


class Writer(Protocol):
    def write(self, name: str, array: np.ndarray) -> None: ...
    def copy(self, dst: str, src: str, symbols: dict[str, int] | None = None) -> None: ...


class Inputs:
    """Reusable host arrays sized for the largest chunk; :meth:`fill` returns prefix views
    (the runtime copies them to pinned staging at ``write``, so reuse is safe)."""

    def __init__(self, max_tokens: int, vocab: int | None = None) -> None:
        self.max_tokens = max_tokens
        self.vocab = vocab
        self._ids = np.zeros(max_tokens, dtype=np.int64)
        self._pos = np.zeros(max_tokens, dtype=np.int64)
        self._pos0 = np.zeros(1, dtype=np.int32)

    def fill(self, ids: Sequence[int] | np.ndarray, pos0: int) -> dict[str, np.ndarray]:
        n = len(ids)
        if not 1 <= n <= self.max_tokens:
            raise KernRunError(f"a call carries 1…{self.max_tokens} tokens, not {n}")
        if not 0 <= pos0 <= I32_MAX - n:
            raise KernRunError(f"position {pos0} does not fit the contract's i32 `pos0`")
        view = self._ids[:n]
        view[:] = ids
        # One reduction: as unsigned, a negative id is >= 2**63, so above any vocabulary.
        if self.vocab is not None and int(view.view(np.uint64).max()) >= self.vocab:
            bad = int(view[(view < 0) | (view >= self.vocab)][0])
            raise KernRunError(f"token id {bad} is outside the model's vocabulary "
                               f"(0…{self.vocab - 1})")
        self._pos[:n] = np.arange(pos0, pos0 + n, dtype=np.int64)
        self._pos0[0] = pos0
        return {TOKEN_IDS: view, POSITIONS: self._pos[:n], POS0: self._pos0}

    def write(self, rt: Writer, ids: Sequence[int] | np.ndarray, pos0: int) -> None:
        for name, arr in self.fill(ids, pos0).items():
            rt.write(name, arr)

    def write_fed(self, rt: Writer, pos0: int) -> None:
        """The inputs of a one-token decode call at ``pos0`` whose token is the previous
        decode's ``next_token``: that is copied on the device (queued after the previous
        run), only the positions come from the host."""
        arrays = self.fill([0], pos0)
        rt.copy(TOKEN_IDS, NEXT_TOKEN, {SYMBOL: 1})
        for name in (POSITIONS, POS0):
            rt.write(name, arrays[name])


def call_inputs(ids: Sequence[int], pos0: int) -> dict[str, np.ndarray]:
    """Fresh arrays for one call (for tests and one-off callers)."""
    return {k: v.copy() for k, v in Inputs(max(1, len(ids))).fill(ids, pos0).items()}
