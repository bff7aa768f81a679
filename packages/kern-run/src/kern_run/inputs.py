"""The contract's input buffers for one single-sequence call, as numpy arrays, and their
prefix writes.

For a call on tokens ``ids`` of one sequence starting at position ``pos0``:

- ``token_ids`` i64 [tokens]: the ids;
- ``positions`` i64 [tokens]: ``pos0, pos0+1, …``;
- ``slots`` i64 [tokens]: the KV slot of each row; one sequence owns the whole pool, so slot =
  position;
- ``pos0`` i32 [1]: ``pos0`` (device memory, so a graph captured once stays valid);
- ``kv_lens`` i32 [tokens]: the keys row t attends to, ``pos0 + t + 1``;
- ``block_table`` i32 [tokens, P]: the identity table (page i = pool page i) in every row
  the call reads. It never changes, so it is written once per row count: the first call
  writes the rows it needs, later calls only rows beyond those (a verify after decodes).

The arrays are the first ``tokens`` rows of each buffer; the runtime writes such prefixes.
The batched engine (:mod:`kern_run.engine`) writes its own rows; it never shares a runtime
with this single-sequence path."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
from kern_manifest.contract import (BLOCK_TABLE, KV_LENS, NEXT_TOKEN, PAGE_TOKENS, POS0,
                                    POSITIONS, SLOTS, SYMBOL, TOKEN_IDS)

from .errors import KernRunError

I32_MAX = 2**31 - 1


def check_pos0(pos0: int, n: int = 1) -> None:
    """Refuse a call of ``n`` tokens from ``pos0`` whose positions (and ``kv_lens``) leave
    the contract's i32."""
    if not 0 <= pos0 <= I32_MAX - n:
        raise KernRunError(f"position {pos0} does not fit the contract's i32 `pos0`")


class Writer(Protocol):
    def write(self, name: str, array: np.ndarray) -> None: ...
    def copy(self, dst: str, src: str, symbols: dict[str, int] | None = None, *,
             dst_row: int = 0) -> None: ...
    def write_scalars(self, values: dict[str, int]) -> None: ...


class Inputs:
    """Reusable host arrays sized for the largest chunk; :meth:`fill` returns prefix views
    (the runtime copies them to pinned staging at ``write``, so reuse is safe).
    ``table_pages``: P, the block table's columns (``ContractInfo.table_pages``);
    ``capacity``: the positions this run may use (None: all P pages): the identity ends at
    the last page they touch, the rest of a row names page 0 (the runtime refuses page
    numbers beyond the loaded pool; no row reads those entries)."""

    def __init__(self, max_tokens: int, vocab: int | None = None, *,
                 table_pages: int = 1, capacity: int | None = None) -> None:
        if table_pages < 1:
            raise KernRunError(f"the block table needs at least one page per row "
                               f"(got {table_pages})")
        self.max_tokens = max_tokens
        self.vocab = vocab
        self._ids = np.zeros(max_tokens, dtype=np.int64)
        self._pos = np.zeros(max_tokens, dtype=np.int64)
        self._pos0 = np.zeros(1, dtype=np.int32)
        self._lens = np.zeros(max_tokens, dtype=np.int32)
        self._table_row = np.arange(table_pages, dtype=np.int32)
        if capacity is not None:
            self._table_row[-(-capacity // PAGE_TOKENS):] = 0
        self.table_rows = 0           # rows of the identity table already on the device

    def fill(self, ids: Sequence[int] | np.ndarray, pos0: int,
             kv_len: int | None = None) -> dict[str, np.ndarray]:
        """The per-call inputs (the block table aside: :meth:`table`). ``kv_len``: every row
        attends to that many keys (DSpark's ``draft``: the context and the whole block, the
        non-causal block); None: row t attends to ``pos0 + t + 1`` (causal)."""
        n = len(ids)
        if not 1 <= n <= self.max_tokens:
            raise KernRunError(f"a call carries 1…{self.max_tokens} tokens, not {n}")
        check_pos0(pos0, n)
        view = self._ids[:n]
        view[:] = ids
        # One reduction: as unsigned, a negative id is >= 2**63, so above any vocabulary.
        if self.vocab is not None and int(view.view(np.uint64).max()) >= self.vocab:
            bad = int(view[(view < 0) | (view >= self.vocab)][0])
            raise KernRunError(f"token id {bad} is outside the model's vocabulary "
                               f"(0…{self.vocab - 1})")
        self._positions(n, pos0)
        if kv_len is not None:
            self._lens[:n] = kv_len
        return {TOKEN_IDS: view, POSITIONS: self._pos[:n], SLOTS: self._pos[:n],
                POS0: self._pos0, KV_LENS: self._lens[:n]}

    def _positions(self, n: int, pos0: int) -> None:
        self._pos[:n] = np.arange(pos0, pos0 + n, dtype=np.int64)
        self._lens[:n] = np.arange(pos0 + 1, pos0 + n + 1, dtype=np.int32)
        self._pos0[0] = pos0

    def table(self, rt: Writer, rows: int) -> None:
        """Make sure the first ``rows`` rows of the device's block table are the identity."""
        if rows > self.table_rows:
            rt.write(BLOCK_TABLE, np.broadcast_to(self._table_row,
                                                  (rows, self._table_row.size)))
            self.table_rows = rows

    def write(self, rt: Writer, ids: Sequence[int] | np.ndarray, pos0: int,
              kv_len: int | None = None) -> None:
        arrays = self.fill(ids, pos0, kv_len)
        self.table(rt, len(ids))
        for name, arr in arrays.items():
            rt.write(name, arr)

    def write_fed(self, rt: Writer, pos0: int) -> None:
        """The inputs of a one-token decode call at ``pos0`` whose token is the previous
        decode's ``next_token``: that is copied on the device (queued after the previous
        run), only the positions come from the host."""
        check_pos0(pos0)
        self.table(rt, 1)
        rt.copy(TOKEN_IDS, NEXT_TOKEN, {SYMBOL: 1})
        # one queued store operation, no staging copies (pos0 is read by prefill only)
        rt.write_scalars({POSITIONS: pos0, SLOTS: pos0, KV_LENS: pos0 + 1})


def table_pages_of(rt: object) -> int:
    """P of a loaded runtime's manifest (``rt.vm``), or the ``table_pages`` a runtime-like
    object states (the test fakes); 1 for one that says neither."""
    vm = getattr(rt, "vm", None)
    if vm is not None:
        return int(vm.manifest.buffers[BLOCK_TABLE].shape[1])
    return int(getattr(rt, "table_pages", 1))


def capacity_of(rt: object) -> int | None:
    """The KV capacity (positions) a runtime was loaded with (``rt.plan``), or the
    ``capacity`` a runtime-like object states (the test fakes); None when neither says."""
    plan = getattr(rt, "plan", None)
    return getattr(plan, "capacity", None) if plan is not None else getattr(rt, "capacity", None)


def write_at(rt, ids: Sequence[int], pos0: int) -> None:
    """One-off single-sequence inputs for a loaded runtime (the benches' profiling calls, the
    device checks): every input of the caller contract, the block table's identity ending at
    the loaded capacity."""
    Inputs(max(1, len(ids)), table_pages=table_pages_of(rt),
           capacity=capacity_of(rt)).write(rt, ids, pos0)


def call_inputs(ids: Sequence[int], pos0: int, table_pages: int = 1
                ) -> dict[str, np.ndarray]:
    """Fresh arrays for one call, the identity table's rows included (for tests and one-off
    callers)."""
    inp = Inputs(max(1, len(ids)), table_pages=table_pages)
    out = {k: v.copy() for k, v in inp.fill(ids, pos0).items()}
    out[BLOCK_TABLE] = np.broadcast_to(inp._table_row, (len(ids), table_pages)).copy()
    return out
