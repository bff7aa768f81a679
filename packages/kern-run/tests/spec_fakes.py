"""A numpy stand-in of the runtime for the speculative loop's CPU tests: ``prefill``,
``decode`` and ``verify`` (docs/caller-contract.md plus the verify contract) computed by a
tiny deterministic "model" over a real KV state.

The model. A call writes slot q = ``positions[i]`` with ``entry(token_ids[i], q)`` for each
of its rows. A row at position q reads exactly slots 0 … q and hashes them, so a wrong slot,
a stale slot (a rejected draft left behind), a skipped write or a wrong position changes its
output and, through the state, every later one. Its logits: pseudo-random values in [0, 1)
from the hash plus a peak of +4 on one token, so top-1/top-2 gaps are ≥ 3 — except where
``ties`` plants a runner-up 0.01 below the peak. The peak token is hash-chosen (``model =
"random"``: little repetition) or, in ``"copy"``, mostly the token that followed the most
recent earlier occurrence of the row's own token (repetitive text: n-gram lookup pays off).

``decode`` and ``verify`` share the row function, so they agree exactly, unless
``verify_flip`` (at a near-tie verify picks the runner-up, like a different bf16 reduction
order) or ``verify_bug`` (verify rows skip their own slot: a real bug, large gaps).
``poison``: after each call every slot past its last position is overwritten with garbage,
so nothing past a call's last position can be relied on. Contract violations raise
:class:`Violation`; captures are recorded in ``events``; graph replays of an uncaptured
(program, tokens) are listed in ``uncaptured``."""

from __future__ import annotations

import numpy as np

M64 = (1 << 64) - 1
PEAK = 4.0
TIE = 0.01
MAX_POSITIONS = 4096


def run_ops(rt, ops, graph: bool) -> None:
    """Replay ``kern_runtime`` sequence ops (``Run`` / ``Copy`` through ``rt.run`` /
    ``rt.copy``; ``Load`` / ``Store`` between a :class:`FakeBox` and ``rt.buffers``)."""
    from kern_runtime import Load, Run, Store
    for op in ops:
        if isinstance(op, Run):
            rt.run(op.program, dict(op.symbols), graph=graph)
        elif isinstance(op, (Load, Store)):
            name = op.dst if isinstance(op, Load) else op.src
            buf = rt.buffers[name]
            rows = dict(op.symbols or {}).get("tokens", len(buf))
            n = rows * buf[:1].nbytes
            if op.box not in getattr(rt, "boxes", ()) or op.offset + n > op.box.array.size:
                raise Violation(f"{type(op).__name__} {name} at byte {op.offset} of {op.box}")
            if isinstance(op, Load):
                row = op.dst_row
                buf[row:row + rows] = op.box.array[op.offset:op.offset + n].view(buf.dtype)
            else:
                op.box.array[op.offset:op.offset + n] = buf[:rows].reshape(-1).view(np.uint8)
        else:
            rt.copy(op.dst, op.src, None if op.symbols is None else dict(op.symbols),
                    dst_row=op.dst_row)


class Violation(AssertionError):
    """The caller broke the contract."""


class FakeBox:
    """``kern_runtime.Mailbox`` on the host: ``array`` (bytes), ``view``, ``mark``, ``wait``
    (logged into the runtime's events)."""

    def __init__(self, rt: "KVModelRuntime", nbytes: int) -> None:
        self.rt, self.array, self.marked = rt, np.zeros(nbytes, np.uint8), False

    def view(self, dtype, offset: int = 0, count: int = 1) -> np.ndarray:
        dt = np.dtype(dtype)
        return self.array[offset:offset + count * dt.itemsize].view(dt)

    def mark(self) -> None:
        self.marked = True
        self.rt.events.append(("mark", self.rt.boxes.index(self)))

    def wait(self) -> None:
        self.rt.events.append(("box_wait", self.rt.boxes.index(self), self.marked))
        self.marked = False


def mix(x: int) -> int:
    """splitmix64's finaliser on a Python int."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


class Pending:
    def __init__(self, rt: "KVModelRuntime", name: str, value: np.ndarray) -> None:
        self.rt, self.name, self.value = rt, name, value

    def wait(self) -> np.ndarray:
        self.rt.events.append(("wait", self.name, self.value.reshape(-1).tolist()))
        return self.value.copy()


class KVModelRuntime:
    INPUTS = {"token_ids": np.int64, "positions": np.int64, "slots": np.int64,
              "pos0": np.int32, "kv_lens": np.int32, "block_table": np.int32}

    def __init__(self, *, vocab: int = 64, capacity: int = 256, max_tokens: int = 16,
                 verify_max: int = 16, model: str = "copy", copy_rate: int = 7,
                 ties: int = 0, verify_flip: bool = False, verify_bug: bool = False,
                 poison: bool = True, seed: int = 0) -> None:
        assert model in ("copy", "random")
        self.vocab, self.capacity, self.max_tokens = vocab, capacity, max_tokens
        self.verify_max, self.model, self.copy_rate, self.ties = verify_max, model, copy_rate, ties
        self.verify_flip, self.verify_bug, self.poison = verify_flip, verify_bug, poison
        rng = np.random.default_rng(seed)
        self._rng = np.random.default_rng(seed + 1)
        # the model does not depend on the capacity (runs with different capacities agree)
        self.weights = rng.integers(1, 2**63 - 1, MAX_POSITIONS, dtype=np.uint64)[:capacity] \
            | np.uint64(1)
        self.salt = int(rng.integers(1, 2**62))
        self.ids_mul = (np.arange(vocab, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        self.kv = np.zeros(capacity, dtype=np.uint64)
        self.table_pages = -(-capacity // 16)     # read by kern_run.inputs.table_pages_of
        self.kv_tok = np.full(capacity, -1, dtype=np.int64)
        self.buffers = {"token_ids": np.zeros(max(max_tokens, verify_max), np.int64),
                        "positions": np.zeros(max(max_tokens, verify_max), np.int64),
                        "slots": np.zeros(max(max_tokens, verify_max), np.int64),
                        "pos0": np.zeros(1, np.int32),
                        "kv_lens": np.zeros(max(max_tokens, verify_max), np.int32),
                        "block_table": np.zeros((max(max_tokens, verify_max),
                                                 self.table_pages), np.int32),
                        "next_token": np.zeros(1, np.int64),
                        "logits": np.zeros((1, vocab), np.float32),
                        "predictions": np.zeros(verify_max, np.int64)}
        self.events: list[tuple] = []
        self.captured: set[tuple[str, int]] = set()
        self.uncaptured: list[tuple[str, int]] = []
        self.captured_sequences: set[tuple] = set()

    # -- the model --------------------------------------------------------------------------
    def entry(self, tok: int, pos: int) -> int:
        return mix((tok * 1_000_003 + pos * 7919 + self.salt) & M64)

    def row_logits(self, q: int, own_slot: bool = True) -> np.ndarray:
        """The logits of the row at position q: a function of slots 0 … q exactly."""
        end = q + 1 if own_slot else q
        h = mix(int(np.sum(self.kv[:end] * self.weights[:end], dtype=np.uint64)) ^ self.salt)
        x = self.ids_mul ^ np.uint64(h)
        x = (x ^ (x >> np.uint64(29))) * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(32))
        logits = ((x >> np.uint64(40)).astype(np.float32) / np.float32(2**24))
        top = mix(h ^ 0x5555) % self.vocab
        if self.model == "copy" and (h >> 3) % 8 < self.copy_rate:
            c = self.kv_tok[q]
            prev = np.flatnonzero(self.kv_tok[:q] == c)
            if prev.size:
                top = int(self.kv_tok[prev[-1] + 1])
        logits[top] += np.float32(PEAK)
        if self.ties and (h >> 13) % self.ties == 0:
            second = (top + 1 + (h >> 17) % (self.vocab - 1)) % self.vocab
            logits[second] = logits[top] - np.float32(TIE)
        return logits

    @staticmethod
    def argmax(logits: np.ndarray) -> int:
        return int(np.argmax(logits))    # ties: lowest id, as the contract's argmax

    # -- RuntimeLike --------------------------------------------------------------------------
    def write(self, name: str, array: np.ndarray) -> None:
        if name not in self.INPUTS:
            raise Violation(f"write to `{name}`, not an input buffer")
        a = np.asarray(array)
        buf = self.buffers[name]
        if a.dtype != self.INPUTS[name] or a.ndim != buf.ndim or a.shape[1:] != buf.shape[1:] \
                or not 1 <= len(a) <= len(buf):
            raise Violation(f"write `{name}`: {a.dtype}{list(a.shape)}")
        buf[:len(a)] = a
        self.events.append(("write", name, a.tolist()))

    def write_scalars(self, values: dict[str, int]) -> None:
        for name, v in values.items():
            if name not in self.INPUTS or self.buffers[name].ndim != 1:
                raise Violation(f"write_scalars to `{name}`, not a 1-D input buffer")
            if not isinstance(v, int):
                raise Violation(f"write_scalars `{name}`: {v!r} is no int")
        for name, v in values.items():
            self.buffers[name][0] = v
        self.events.append(("write_scalars", dict(values)))

    def copy(self, dst: str, src: str, symbols=None, *, dst_row: int = 0) -> None:
        """decode's ``next_token`` into ``token_ids`` row 0, or (DSpark's chained round) the
        first m ``draft_tokens`` into ``token_ids`` rows 1 … m."""
        if (dst, src, symbols, dst_row) == ("token_ids", "next_token", {"tokens": 1}, 0):
            rows = 1
        elif (dst, src, dst_row) == ("token_ids", "draft_tokens", 1) and src in self.buffers \
                and set(symbols or {}) == {"tokens"} \
                and 1 <= symbols["tokens"] < len(self.buffers[dst]):
            rows = symbols["tokens"]
        else:
            raise Violation(f"copy {src} -> {dst} at {symbols}, row {dst_row}")
        self.buffers[dst][dst_row:dst_row + rows] = self.buffers[src][:rows]
        self.events.append(("copy", dst, src))

    def capture(self, program: str, symbols: dict[str, int]) -> None:
        key = (program, symbols["tokens"])
        self.captured.add(key)        # idempotent, as Runtime.capture (cached per key)
        self.events.append(("capture", program, dict(symbols)))

    def synchronize(self) -> None:
        self.events.append(("sync",))

    def capture_sequence(self, ops, *, copy_kernel: bool = False) -> None:
        # idempotent, as Runtime.capture_sequence (keyed by the ops and the copies' kind)
        self.captured_sequences.add((tuple(ops), copy_kernel))
        self.events.append(("capture_sequence", len(ops)))

    def run_sequence(self, ops, *, graph: bool = True, copy_kernel: bool = False) -> None:
        """``Runtime.run_sequence``: the ops in order, as the individual calls would run them;
        with ``graph`` its one graph must have been captured before."""
        if graph and (tuple(ops), copy_kernel) not in self.captured_sequences:
            self.uncaptured.append(("sequence", len(ops)))
        self.events.append(("sequence", len(ops)))
        run_ops(self, ops, graph)

    def run(self, program: str, symbols: dict[str, int], *, graph: bool = True) -> None:
        if set(symbols) != {"tokens"}:
            raise Violation(f"symbols {symbols}")
        t = symbols["tokens"]
        limit = self.limits().get(program)
        if limit is None:
            raise Violation(f"unknown program `{program}`")
        if not 1 <= t <= limit:
            raise Violation(f"{program} with tokens = {t}")
        if graph and (program, t) not in self.captured:
            self.uncaptured.append((program, t))
        ids = self.buffers["token_ids"][:t].copy()
        pos = self.buffers["positions"][:t].copy()
        p0 = int(pos[0])
        self.check_paged(program, pos)
        if p0 + t > self.capacity:
            raise Violation(f"{program} writes position {p0 + t - 1}; capacity {self.capacity}")
        if ids.min() < 0 or ids.max() >= self.vocab:
            raise Violation(f"{program}: token ids {ids.tolist()}")
        self.events.append(("run", program, dict(symbols), graph, p0, ids.tolist()))
        for i, q in zip(ids.tolist(), pos.tolist()):
            self.kv[q] = np.uint64(self.entry(i, q))
            self.kv_tok[q] = i
        if program in ("decode", "decode_spec"):
            lg = self.row_logits(p0)
            self.buffers["logits"][0] = lg
            self.buffers["next_token"][0] = self.argmax(lg)
        elif program == "verify":
            for r, q in enumerate(pos.tolist()):
                lg = self.row_logits(q, own_slot=not self.verify_bug)
                best = self.argmax(lg)
                if self.verify_flip:
                    rest = lg.copy()
                    rest[best] = -np.inf
                    second = self.argmax(rest)
                    if lg[best] - lg[second] < 0.05:
                        best = second
                self.buffers["predictions"][r] = best
        self.after_run(program, pos)
        if self.poison:
            end = p0 + t
            self.kv[end:] = self._rng.integers(0, 2**63, self.capacity - end, dtype=np.uint64)
            self.kv_tok[end:] = self._rng.integers(0, self.vocab, self.capacity - end)

    def limits(self) -> dict[str, int]:
        """program -> the most ``tokens`` it takes."""
        return {"prefill": self.max_tokens, "decode": 1, "verify": self.verify_max}

    def after_run(self, program: str, pos: np.ndarray) -> None:
        """Hook: the call's KV rows and outputs are written (nothing past it poisoned yet)."""

    def check_paged(self, program: str, pos: np.ndarray) -> None:
        """One sequence: consecutive positions, slot = position, the identity table in every
        row the program reads; pos0 (prefill) and kv_lens = position + 1 (the others)."""
        t, p0 = len(pos), int(pos[0])
        b = self.buffers
        if pos.tolist() != list(range(p0, p0 + t)) or b["slots"][:t].tolist() != pos.tolist():
            raise Violation(f"{program}: positions {pos.tolist()}, slots "
                            f"{b['slots'][:t].tolist()}")
        if program == "prefill" and int(b["pos0"][0]) != p0:
            raise Violation(f"prefill: pos0 {int(b['pos0'][0])} with positions from {p0}")
        if program != "prefill" and b["kv_lens"][:t].tolist() != (pos + 1).tolist():
            raise Violation(f"{program}: kv_lens {b['kv_lens'][:t].tolist()} at {pos.tolist()}")
        rows = 1 if program == "prefill" else t
        pages = -(-(p0 + t) // 16)
        if (b["block_table"][:rows, :pages] != np.arange(pages)).any():
            raise Violation(f"{program}: block table rows {b['block_table'][:rows].tolist()}")

    def _extent(self, name: str, symbols) -> np.ndarray:
        buf = self.buffers[name]
        if name == "predictions":
            return buf[:symbols["tokens"]].copy()
        return buf.copy()

    def read_async(self, name: str, symbols=None) -> Pending:
        self.events.append(("read_async", name))
        return Pending(self, name, self._extent(name, symbols))

    def read(self, name: str, symbols=None) -> np.ndarray:
        self.events.append(("read", name))
        return self._extent(name, symbols)

    # -- helpers for tests --------------------------------------------------------------------
    def runs(self, program: str | None = None) -> list[tuple]:
        return [e for e in self.events if e[0] == "run" and (program is None or e[1] == program)]


class Oracle:
    """A drafter that knows the plain run's output (``truth``: prompt + produced tokens,
    EOS included) and proposes it, possibly corrupted; it also checks that the loop feeds it
    exactly the prompt and then the emitted tokens."""

    def __init__(self, truth: list[int], *, rng: np.random.Generator | None = None,
                 vocab: int = 64, empty: float = 0.0, wrong: float = 0.0) -> None:
        self.truth, self.rng, self.vocab = truth, rng, vocab
        self.empty, self.wrong = empty, wrong
        self.fed: list[int] = []
        self.asked: list[tuple[int, int]] = []     # (sequence length, k)

    def extend(self, tokens) -> None:
        for t in tokens:
            i = len(self.fed)
            assert i < len(self.truth) and self.truth[i] == int(t), \
                f"fed token {t} at {i}; the plain sequence has {self.truth[i:i + 1]}"
            self.fed.append(int(t))

    def propose(self, k: int) -> list[int]:
        self.asked.append((len(self.fed), k))
        if k < 1:
            return []
        right = self.truth[len(self.fed):len(self.fed) + k]
        if self.rng is None:
            return list(right)
        if self.rng.random() < self.empty:
            return []
        m = int(self.rng.integers(1, k + 1))
        good = int(self.rng.integers(0, m + 1)) if self.rng.random() < 1 - self.wrong else 0
        out = list(right[:min(good, m)])
        while len(out) < m:
            out.append(int(self.rng.integers(0, self.vocab)))
        return out


class Never:
    """A drafter that never proposes (text where lookup finds nothing)."""

    def __init__(self) -> None:
        self.fed: list[int] = []

    def extend(self, tokens) -> None:
        self.fed += [int(t) for t in tokens]

    def propose(self, k: int) -> list[int]:
        return []


class _Ready:
    def __init__(self, value: np.ndarray) -> None:
        self.value = value

    def wait(self) -> np.ndarray:
        return self.value


class NullRuntime:
    """No model and no records, to time the loop's own host work: ``verify`` predicts every
    draft and continues the last one (a loop that accepts everything), ``decode`` answers
    ``1 + token % 5``."""

    def __init__(self, max_tokens: int = 16) -> None:
        self.ids = np.zeros(max_tokens, np.int64)
        self.t = 1

    def write(self, name: str, array: np.ndarray) -> None:
        if name == "token_ids":
            self.ids[:len(array)] = array

    def write_scalars(self, values: dict[str, int]) -> None:
        pass

    def copy(self, dst: str, src: str, symbols=None) -> None:
        pass

    def run(self, program: str, symbols: dict[str, int], *, graph: bool = True) -> None:
        self.t = symbols["tokens"]

    def read_async(self, name: str, symbols=None) -> _Ready:
        t = self.t
        if name == "predictions":
            out = np.empty(t, np.int64)
            out[:t - 1] = self.ids[1:t]
            out[t - 1] = self.ids[t - 1]
            return _Ready(out)
        return _Ready(np.array([1 + self.ids[0] % 5], np.int64))

    def synchronize(self) -> None:
        pass

    def capture(self, program: str, symbols: dict[str, int]) -> None:
        pass


class Mailboxes:
    """Mixin of a fake runtime with mailboxes (``Runtime.mailbox``): the generation loops
    take their fed steps through them (:mod:`kern_run.fed`)."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.boxes: list[FakeBox] = []

    def mailbox(self, nbytes: int) -> FakeBox:
        box = FakeBox(self, nbytes)
        self.boxes.append(box)
        return box


class MailboxKVRuntime(Mailboxes, KVModelRuntime):
    """:class:`KVModelRuntime` with mailboxes."""
