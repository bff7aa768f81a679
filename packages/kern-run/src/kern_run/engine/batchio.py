"""The contract's paged inputs for a prefill chunk or a decode/batch step, as reusable host
arrays and their prefix writes (the runtime copies each write to staging at once, so the
arrays may be refilled right after).

Per row t of a step with bucket B (rows beyond the sequences' are pad rows):

| input | dtype, shape | a sequence's row | a pad row |
|---|---|---|---|
| ``token_ids`` | i64 [B] | its next token | 0 |
| ``positions`` | i64 [B] | its next position p | 0 |
| ``slots`` | i64 [B] | p's slot through its pages | 0 (the pad page) |
| ``kv_lens`` | i32 [B] | p + 1 | 1 |
| ``block_table`` | i32 [B, P] | its pages, then zeros | zeros |
| ``pos0`` | i32 [1] | ``positions[0]`` (bucket 1's ``decode``) | |

A prefill chunk of ``count`` prompt tokens at ``pos0``: the tokens, positions pos0…,
their slots, kv_lens = position + 1, ``pos0``, and table row 0 = the sequence's row."""

from __future__ import annotations

import numpy as np
from kern_manifest.contract import BLOCK_TABLE, KV_LENS, POS0, POSITIONS, SLOTS, TOKEN_IDS

from .sequence import Sequence


class BatchInputs:
    def __init__(self, rows: int, width: int) -> None:
        self.ids = np.zeros(rows, np.int64)
        self.pos = np.zeros(rows, np.int64)
        self.slots = np.zeros(rows, np.int64)
        self.lens = np.ones(rows, np.int32)
        self.table = np.zeros((rows, width), np.int32)
        self.pos0 = np.zeros(1, np.int32)

    def _positions(self, rows: list[Sequence], b: int) -> None:
        """positions / slots / kv_lens of ``rows`` then pad rows, in the first b entries."""
        n = len(rows)
        for i, s in enumerate(rows):
            p = s.next_pos
            self.pos[i] = p
            self.slots[i] = s.slot(p)
            self.lens[i] = p + 1
        self.pos[n:b] = 0
        self.slots[n:b] = 0
        self.lens[n:b] = 1
        self.pos0[0] = self.pos[0]

    def write_all(self, rt, rows: list[Sequence], b: int) -> None:
        """Every input of a step over ``rows`` (bucket ``b``) from the host."""
        self._positions(rows, b)
        n = len(rows)
        for i, s in enumerate(rows):
            self.ids[i] = s.feed_token()
            self.table[i] = s.table
        self.ids[n:b] = 0
        self.table[n:b] = 0
        rt.write(TOKEN_IDS, self.ids[:b])
        rt.write(POSITIONS, self.pos[:b])
        rt.write(SLOTS, self.slots[:b])
        rt.write(KV_LENS, self.lens[:b])
        rt.write(BLOCK_TABLE, self.table[:b])
        rt.write(POS0, self.pos0)

    def write_fed(self, rt, rows: list[Sequence], b: int, *, pos0: bool) -> None:
        """The host's part of a step whose token_ids the device copied from the previous
        step's next_token (same rows, same order: the block table stays)."""
        self._positions(rows, b)
        rt.write(POSITIONS, self.pos[:b])
        rt.write(SLOTS, self.slots[:b])
        rt.write(KV_LENS, self.lens[:b])
        if pos0:
            rt.write(POS0, self.pos0)

    def write_prefill(self, rt, seq: Sequence, pos0: int, count: int) -> None:
        ids = np.asarray(seq.req.prompt[pos0:pos0 + count], dtype=np.int64)
        pos = np.arange(pos0, pos0 + count, dtype=np.int64)
        self.pos0[0] = pos0
        rt.write(TOKEN_IDS, ids)
        rt.write(POSITIONS, pos)
        rt.write(SLOTS, seq.slots(pos0, count))
        rt.write(KV_LENS, (pos + 1).astype(np.int32))
        rt.write(POS0, self.pos0)
        rt.write(BLOCK_TABLE, seq.table[None, :])
