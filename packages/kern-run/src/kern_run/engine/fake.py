"""A fake paged runtime (numpy, no GPU) for the engine's and the server's CPU tests.

It implements :class:`kern_run.generate.RuntimeLike` over the contract's buffers
(``token_ids``, ``positions``, ``slots``, ``pos0``, ``kv_lens``, ``block_table`` in;
``next_token`` out) and a KV pool of ``capacity`` slots holding one 64-bit value each (one
"layer" is enough). A run of ``prefill`` / ``decode`` / ``batch`` with ``tokens`` = T rows:

1. every row t writes ``kv[slots[t]] = h(token_ids[t], positions[t])``;
2. ``decode`` / ``batch``: ``next_token[t] = H(kv at keys 0 … kv_lens[t] − 1 of row t, in
   order) % vocab``, key j of row t at slot ``block_table[t][j // 16] * 16 + j % 16``;
   ``decode`` also writes ``logits`` [1, vocab] (f32 below 1, the token's at 2).

So the token depends on the whole (token, position) history a row reads: a wrong slot, a
stale or foreign page, a wrong kv_len or cross-talk between rows changes it (unwritten slots,
page 0 included, hold random poison). Rows must be consistent (``slots[t]`` is the slot of
``positions[t]`` through the row's table; ``prefill`` uses table row 0 for all rows), else
the run is refused like a device assert would fire.

``plain=True``: a run whose ``slots`` / ``kv_lens`` / ``block_table`` were never written
takes batch 1's values (slot = position, kv_len = position + 1, an identity table), so the
plain :func:`kern_run.generate.generate` runs on it before its inputs write them.

Calls are logged in ``log``: ("write", name, rows), ("copy", dst, src, rows), ("run",
program, tokens, graph), ("read_async", name, rows), ("wait", name), ("read", name),
("capture", program, tokens), ("sync",)."""

from __future__ import annotations

import numpy as np
from kern_manifest.contract import (BATCH, BLOCK_TABLE, DECODE, KV_LENS, LOGITS, NEXT_TOKEN,
                                    PAGE_TOKENS, POS0, POSITIONS, PREFILL, SLOTS, SYMBOL,
                                    TOKEN_IDS)

from ..errors import KernRunError

_K1 = np.uint64(0x9E3779B97F4A7C15)
_K2 = np.uint64(0xC2B2AE3D27D4EB4F)


class FakeRuntimeError(KernRunError):
    """A call the real runtime (or a device assert) would refuse."""


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer over a uint64 array (wrapping arithmetic)."""
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def kv_value(token: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """h: the KV value a row writes (uint64 per row)."""
    return mix(token.astype(np.uint64) * _K1 + pos.astype(np.uint64) * _K2 + np.uint64(1))


def fold(values: np.ndarray) -> int:
    """H: an order-sensitive hash of the keys a row reads."""
    idx = mix(np.arange(values.size, dtype=np.uint64) + np.uint64(7))
    return int(mix(np.array([mix(values ^ idx).sum(dtype=np.uint64)
                             + np.uint64(values.size)]))[0])


class FakeRead:
    def __init__(self, rt: "FakePagedRuntime", name: str, value: np.ndarray) -> None:
        self.rt, self.name, self.value = rt, name, value

    def wait(self) -> np.ndarray:
        self.rt.log.append(("wait", self.name))
        return self.value


class FakePagedRuntime:
    """See the module doc. ``table_pages``: block_table's 2nd dim (default: every page)."""

    PROGRAMS = (PREFILL, DECODE, BATCH)

    def __init__(self, capacity: int, *, max_tokens: int = 64, vocab: int = 1000,
                 table_pages: int | None = None, seed: int = 0, plain: bool = False) -> None:
        self.capacity, self.max_tokens, self.vocab = capacity, max_tokens, vocab
        self.table_pages = table_pages or -(-capacity // PAGE_TOKENS)
        self.plain = plain
        rng = np.random.default_rng(seed)
        self.kv = rng.integers(0, 2**63, size=capacity, dtype=np.int64).astype(np.uint64)
        t = max_tokens
        self.buffers: dict[str, np.ndarray] = {
            TOKEN_IDS: np.zeros(t, np.int64), POSITIONS: np.zeros(t, np.int64),
            SLOTS: np.zeros(t, np.int64), POS0: np.zeros(1, np.int32),
            KV_LENS: np.zeros(t, np.int32),
            BLOCK_TABLE: np.zeros((t, self.table_pages), np.int32),
            NEXT_TOKEN: np.zeros(t, np.int64), LOGITS: np.zeros((1, vocab), np.float32)}
        self.inputs = (TOKEN_IDS, POSITIONS, SLOTS, POS0, KV_LENS, BLOCK_TABLE)
        self.written: set[str] = set()
        self.captured: set[tuple[str, int]] = set()
        self.uncaptured_graphs = 0        # graph runs of a key never captured
        self.log: list[tuple] = []
        self.closed = False

    # -- RuntimeLike --------------------------------------------------------------------
    def write(self, name: str, array: np.ndarray) -> None:
        if name not in self.inputs:
            raise FakeRuntimeError(f"write: `{name}` is not an input buffer")
        buf = self.buffers[name]
        if array.dtype != buf.dtype:
            raise FakeRuntimeError(f"write `{name}`: dtype {array.dtype}, the buffer's is "
                                   f"{buf.dtype}")
        flat = np.ascontiguousarray(array).reshape(-1)
        if flat.size > buf.size:
            raise FakeRuntimeError(f"write `{name}`: {flat.size} elements, room for {buf.size}")
        buf.reshape(-1)[:flat.size] = flat
        self.written.add(name)
        rows = array.shape[0] if array.ndim else 1
        self.log.append(("write", name, rows))

    def write_scalars(self, values: dict[str, int]) -> None:
        for name in values:
            if name not in self.inputs or self.buffers[name].ndim != 1:
                raise FakeRuntimeError(f"write_scalars: `{name}` is not a 1-D input buffer")
        for name, v in values.items():
            self.buffers[name][0] = v
            self.written.add(name)
        self.log.append(("write_scalars", tuple(values)))

    def copy(self, dst: str, src: str, symbols: dict[str, int] | None = None, *,
             dst_row: int = 0) -> None:
        rows = self._tokens(symbols, "copy")
        if dst not in self.inputs or self.buffers[dst].dtype != self.buffers[src].dtype:
            raise FakeRuntimeError(f"copy `{src}` into `{dst}`: not an input of that dtype")
        if not 0 <= dst_row <= len(self.buffers[dst]) - rows:
            raise FakeRuntimeError(f"copy `{src}` into `{dst}`: rows {dst_row} … "
                                   f"{dst_row + rows - 1} do not fit")
        self.buffers[dst][dst_row:dst_row + rows] = self.buffers[src][:rows]
        self.written.add(dst)
        self.log.append(("copy", dst, src, rows))

    def run(self, program: str, symbols: dict[str, int], *, graph: bool = True) -> None:
        if program not in self.PROGRAMS:
            raise FakeRuntimeError(f"unknown program `{program}`")
        n = self._tokens(symbols, f"program `{program}`")
        if program == DECODE and n != 1:
            raise FakeRuntimeError(f"program `{DECODE}` runs with {SYMBOL} = 1, not {n}")
        if graph and (program, n) not in self.captured:
            self.uncaptured_graphs += 1
            self.captured.add((program, n))
        self.log.append(("run", program, n, graph))
        ids, pos, slots, lens, table = self._view(n)
        rows = np.zeros(n, dtype=np.int64) if program == PREFILL else np.arange(n)
        own = table[rows, pos // PAGE_TOKENS].astype(np.int64) * PAGE_TOKENS + pos % PAGE_TOKENS
        bad = np.flatnonzero((own != slots) | (slots < 0) | (slots >= self.capacity))
        if bad.size:
            t = int(bad[0])
            raise FakeRuntimeError(f"program `{program}` row {t}: slot {slots[t]} is not "
                                   f"position {pos[t]}'s slot {own[t]} through its block table")
        self.kv[slots] = kv_value(ids, pos)
        if program == PREFILL:
            return
        out = self.buffers[NEXT_TOKEN]
        for t in range(n):
            j = np.arange(int(lens[t]), dtype=np.int64)
            keys = table[t, j // PAGE_TOKENS].astype(np.int64) * PAGE_TOKENS + j % PAGE_TOKENS
            h = fold(self.kv[keys])
            out[t] = h % self.vocab
        if program == DECODE:      # logits in [0, 1), the token's at 2: its row's argmax
            lg = (mix(np.arange(self.vocab, dtype=np.uint64) ^ np.uint64(h)) >> np.uint64(40))
            self.buffers[LOGITS][0] = lg.astype(np.float32) / np.float32(2**24)
            self.buffers[LOGITS][0, out[0]] = 2.0

    def read_async(self, name: str, symbols: dict[str, int] | None = None) -> FakeRead:
        rows = self._tokens(symbols, f"read `{name}`")
        self.log.append(("read_async", name, rows))
        return FakeRead(self, name, self.buffers[name][:rows].copy())

    def read(self, name: str, symbols: dict[str, int] | None = None) -> np.ndarray:
        rows = 1 if name == LOGITS else self._tokens(symbols, f"read `{name}`")
        self.log.append(("read", name))
        return self.buffers[name][:rows].copy()

    def synchronize(self) -> None:
        self.log.append(("sync",))

    def capture(self, program: str, symbols: dict[str, int]) -> None:
        if program not in self.PROGRAMS:
            raise FakeRuntimeError(f"unknown program `{program}`")
        n = self._tokens(symbols, f"capture `{program}`")
        self.captured.add((program, n))
        self.log.append(("capture", program, n))

    def close(self) -> None:
        self.closed = True

    # -- helpers ------------------------------------------------------------------------
    def _tokens(self, symbols: dict[str, int] | None, where: str) -> int:
        n = (symbols or {}).get(SYMBOL, self.max_tokens)
        if not 1 <= n <= self.max_tokens:
            raise FakeRuntimeError(f"{where}: symbol `{SYMBOL}` = {n} is outside "
                                   f"[1, {self.max_tokens}]")
        return n

    def _view(self, n: int):
        """(ids, positions, slots, kv_lens, table) of the first n rows; batch 1's derived
        values for inputs never written when ``plain``."""
        b = self.buffers
        pos = b[POSITIONS][:n].copy()
        plain = lambda name: self.plain and name not in self.written  # noqa: E731
        slots = pos.copy() if plain(SLOTS) else b[SLOTS][:n].copy()
        lens = (pos + 1).astype(np.int32) if plain(KV_LENS) else b[KV_LENS][:n].copy()
        if plain(BLOCK_TABLE):
            table = np.tile(np.arange(self.table_pages, dtype=np.int32), (n, 1))
        else:
            table = b[BLOCK_TABLE][:n].copy()
        return b[TOKEN_IDS][:n].copy(), pos, slots, lens, table

    def calls(self, kind: str) -> list[tuple]:
        return [e for e in self.log if e[0] == kind]
