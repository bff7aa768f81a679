"""A numpy stand-in of a DSpark manifest (docs/dspark.md) for the loop's CPU tests: the target
of :class:`spec_fakes.KVModelRuntime` (``prefill``, ``decode``, ``verify``) plus
``decode_spec``, ``draft`` and ``draft_precompute``, with a ``carry`` buffer and a draft KV
state.

- **Taps.** ``prefill``, ``decode_spec`` and ``verify`` write ``carry`` row i = the feature of
  their row i: a hash of the target KV slots 0 … q (q = that row's position), exactly what
  the row itself read; ``carry_pos[i]`` = q. Plain ``decode`` leaves the carry alone.
- **draft_precompute** and its prompt twin ``draft_precompute_prefill`` (tokens = t; the
  twin only after ``prefill``): checks ``carry_pos[i] == positions[i] == slots[i]`` for
  its t rows and writes ``draft_kv[slots[i]] = carry[i]``. ``strict`` (default): it must
  directly follow a tapped call, with t = that call's tokens (prefill, decode_spec), or
  after a verify t = j + 1, j the accepted prefix of that verify's drafts and predictions, or
  t = the verify's tokens (the loop's ``ahead``: every verified row, queued before the
  predictions are read).
- **In-graph acceptance** (``accepting``, docs/dspark.md step 7): ``verify`` also writes the
  ``next.*`` outputs from its own rows and predictions, as ABI.md 6 states them, and
  :meth:`copy` takes them into the inputs (the fake's ``verify`` cannot tell fed inputs from
  written ones: the checks below see the same arrays).
- **draft** (tokens = B): checks ``token_ids = [a, mask × (B−1)]``, positions p … p+B−1 =
  slots, ``kv_lens`` = p + B in every row, the identity table, and that ``draft_kv[t]`` holds
  the target's feature of every position t < p (what the precompute of accepted rows must
  have left; any stale, missing or shifted row fails). It then writes garbage into the draft
  KV of the block (its own block K/V, overwritten later), and ``draft_tokens``: the target's
  true greedy continuation of ``a`` (simulated on a copy of the state), of which the first
  ``plan(round, p)`` are kept and the rest made wrong — acceptance patterns on demand.

Contract violations raise :class:`spec_fakes.Violation`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kern_run.spec.accept import accept_prefix
from spec_fakes import M64, KVModelRuntime, Violation, mix, run_ops

TAPPED = ("prefill", "decode_spec", "verify")
PRECOMPUTES = ("draft_precompute", "draft_precompute_prefill")
#: The acceptance outputs: (name, dtype, rows beyond B); the input each may be copied into.
NEXT = (("next.token_ids", np.int64, 0), ("next.positions", np.int64, 1),
        ("next.draft_kv_lens", np.int32, 0), ("next.verify_kv_lens", np.int32, 1))
FEEDS = {("token_ids", "next.token_ids"), ("positions", "next.positions"),
         ("slots", "next.positions"), ("kv_lens", "next.draft_kv_lens"),
         ("kv_lens", "next.verify_kv_lens")}


def mix_np(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (as :func:`spec_fakes.mix`)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class DSparkRuntime(KVModelRuntime):
    def __init__(self, *, block: int = 7, mask: int = 3,
                 plan: Callable[[int, int], int] | None = None, strict: bool = True,
                 accepting: bool = False, **kw) -> None:
        super().__init__(**kw)
        self.block, self.mask, self.plan, self.strict = block, mask, plan, strict
        self.accepting = accepting
        if accepting:
            for name, dtype, rows in NEXT:
                self.buffers[name] = np.full(block + rows, -1, dtype)
        rows = max(self.max_tokens, self.verify_max, block)
        self.buffers["carry"] = np.zeros(rows, np.uint64)
        self.buffers["draft_tokens"] = np.zeros(rows, np.int64)
        self.carry_pos = np.full(rows, -1, np.int64)
        self.draft_kv = np.zeros(self.capacity, np.uint64)
        self.last: tuple | None = None    # (program, tokens, ids, predictions) of the last run
        self.rounds = 0                   # draft calls so far
        self.truths: list[list[int]] = []  # each draft's true continuation (for the tests)

    def limits(self) -> dict[str, int]:
        return super().limits() | {"decode_spec": 1, "draft": self.block,
                                   "draft_precompute": self.max_tokens,
                                   "draft_precompute_prefill": self.max_tokens}

    # -- taps -------------------------------------------------------------------------------
    def features(self, end: int) -> np.ndarray:
        """The target's feature of every position 0 … end−1 from the current state."""
        acc = np.cumsum(self.kv[:end] * self.weights[:end], dtype=np.uint64)
        return mix_np(acc ^ np.uint64(self.salt ^ 0xFEA7))

    def after_run(self, program: str, pos: np.ndarray) -> None:
        t = len(pos)
        if program in TAPPED:
            p0 = int(pos[0])
            self.buffers["carry"][:t] = self.features(p0 + t)[p0:]
            self.carry_pos[:t] = pos
        preds = self.buffers["predictions"][:t].tolist() if program == "verify" else None
        ids = self.buffers["token_ids"][:t].tolist()
        self.last = (program, t, ids, preds)
        if preds is not None and self.accepting:
            j = accept_prefix(ids[1:], preds)
            q, B, b = int(pos[0]) + j + 1, self.block, self.buffers
            b["next.token_ids"][:] = [preds[j]] + [self.mask] * (B - 1)
            b["next.positions"][:] = np.arange(q, q + B + 1)
            b["next.draft_kv_lens"][:] = q + B
            b["next.verify_kv_lens"][:] = np.arange(q + 1, q + B + 2)

    def copy(self, dst: str, src: str, symbols=None, *, dst_row: int = 0) -> None:
        """The acceptance outputs into the inputs (whole buffers, from row 0), else the
        target's copies (:meth:`spec_fakes.KVModelRuntime.copy`)."""
        if not src.startswith("next."):
            return super().copy(dst, src, symbols, dst_row=dst_row)
        if not self.accepting or (dst, src) not in FEEDS or dst_row:
            raise Violation(f"copy {src} -> {dst} at {symbols}, row {dst_row}")
        rows = len(self.buffers[src])
        self.buffers[dst][:rows] = self.buffers[src]
        self.events.append(("copy", dst, src))

    # -- the draft programs -----------------------------------------------------------------
    def run(self, program: str, symbols: dict[str, int], *, graph: bool = True) -> None:
        if program not in ("draft",) + PRECOMPUTES:
            return super().run(program, symbols, graph=graph)
        if set(symbols) != {"tokens"}:
            raise Violation(f"symbols {symbols}")
        t = symbols["tokens"]
        if not 1 <= t <= self.limits()[program]:
            raise Violation(f"{program} with tokens = {t}")
        if graph and (program, t) not in self.captured:
            self.uncaptured.append((program, t))
        pos = self.buffers["positions"][:t].copy()
        if self.buffers["slots"][:t].tolist() != pos.tolist():
            raise Violation(f"{program}: slots {self.buffers['slots'][:t].tolist()} at "
                            f"positions {pos.tolist()}")
        if int(pos[-1]) >= self.capacity or int(pos[0]) < 0:
            raise Violation(f"{program} writes draft KV at {pos.tolist()}; capacity "
                            f"{self.capacity}")
        ids = self.buffers["token_ids"][:t].tolist()
        self.events.append(("run", program, dict(symbols), graph, int(pos[0]), ids))
        if program in PRECOMPUTES:
            self.precompute(t, pos, program)
        else:
            self.draft(t, pos)
        self.last = (program, t, ids, None)

    def precompute(self, t: int, pos: np.ndarray, program: str = "draft_precompute") -> None:
        if self.strict:
            prog, tokens, ids, preds = self.last or (None, 0, [], None)
            if program == "draft_precompute_prefill" and prog != "prefill":
                raise Violation(f"{program} after `{prog}`: it serves the prompt's chunks")
            if prog not in TAPPED:
                raise Violation(f"draft_precompute after `{prog}`, not after a tapped call")
            want = ({accept_prefix(ids[1:], preds) + 1, tokens} if prog == "verify"
                    else {tokens})
            if t not in want:
                raise Violation(f"draft_precompute with tokens = {t} after {prog} (tokens "
                                f"{tokens}); expected {' or '.join(map(str, sorted(want)))}")
        if self.carry_pos[:t].tolist() != pos.tolist():
            raise Violation(f"draft_precompute at positions {pos.tolist()}; the carry rows "
                            f"are of positions {self.carry_pos[:t].tolist()}")
        self.draft_kv[pos] = self.buffers["carry"][:t]

    def draft(self, t: int, pos: np.ndarray) -> None:
        b = self.buffers
        p = int(pos[0])
        ids = b["token_ids"][:t].tolist()
        if ids[1:] != [self.mask] * (t - 1) or not 0 <= ids[0] < self.vocab:
            raise Violation(f"draft: token_ids {ids}; expected [anchor, mask {self.mask} × "
                            f"{t - 1}]")
        if pos.tolist() != list(range(p, p + t)):
            raise Violation(f"draft: positions {pos.tolist()}")
        if b["kv_lens"][:t].tolist() != [p + t] * t:
            raise Violation(f"draft: kv_lens {b['kv_lens'][:t].tolist()}; every row sees "
                            f"the context and the block: {p + t}")
        pages = -(-(p + t) // 16)
        if (b["block_table"][:t, :pages] != np.arange(pages)).any():
            raise Violation("draft: block table rows are not the identity")
        bad = np.flatnonzero(self.draft_kv[:p] != self.features(p))
        if bad.size:
            raise Violation(f"draft at {p}: the draft KV of position {int(bad[0])} is not the "
                            f"target's feature there (missing or stale precompute)")
        truth = self.continuation(ids[0], p, t)
        self.truths.append(truth)
        keep = t if self.plan is None else max(0, min(t, self.plan(self.rounds, p)))
        out = truth[:keep] + [(x + 1 + i) % self.vocab for i, x in
                              enumerate(truth[keep:], start=keep)]
        b["draft_tokens"][:t] = out
        self.draft_kv[p:p + t] = self._rng.integers(0, 2**63, t, dtype=np.uint64)
        self.rounds += 1

    def continuation(self, anchor: int, p: int, t: int) -> list[int]:
        """The target's greedy tokens after ``anchor`` at p (t of them), on a copy."""
        kv, kv_tok = self.kv.copy(), self.kv_tok.copy()
        out, tok = [], anchor
        for q in range(p, min(p + t, self.capacity)):
            self.kv[q] = np.uint64(self.entry(tok, q))
            self.kv_tok[q] = tok
            tok = self.argmax(self.row_logits(q))
            out.append(tok)
        self.kv, self.kv_tok = kv, kv_tok
        return out + [0] * (t - len(out))


class FakeEvent:
    """A timing event on a fake clock: ``record`` stamps the runtime's GPU clock (one tick
    per run), ``elapsed_ms`` subtracts stamps."""

    def __init__(self, rt: DSparkRuntime) -> None:
        self.rt, self.at, self.closed = rt, None, False

    def record(self) -> None:
        self.at = sum(1 for e in self.rt.events if e[0] == "run")

    def elapsed_ms(self, start: "FakeEvent") -> float:
        assert self.at is not None and start.at is not None
        return float(self.at - start.at)

    def close(self) -> None:
        self.closed = True


__all__ = ["DSparkRuntime", "FakeEvent", "M64", "Violation", "mix", "mix_np"]


# -- a DSpark bundle on disk (manifest, dspark.json, draft.safetensors) -----------------------
HIDDEN = 8


def dspark_manifest(vocab: int, max_tokens: int = 16, layers: int = 1, block: int = 7,
                    accept_mask: int | None = None) -> dict:
    """:func:`krun_fakes.contract_manifest` with verify, plus what docs/dspark.md adds: the
    draft KV states, ``carry``, ``draft_tokens``, two ``draft.*`` weights and the three
    programs (one made-up kernel each; the fake runtime never launches them); with
    ``accept_mask`` also verify's in-graph acceptance (the ``next.*`` outputs and one
    dispatch passing them and the mask token)."""
    from krun_fakes import contract_manifest
    doc = contract_manifest(max_tokens=max_tokens, vocab=vocab, verify=True)
    for j in range(layers):
        for kv in "kv":
            doc["states"][f"draft.kv.L{j}.{kv}"] = {"bytes_per_token": 64}
    doc["buffers"]["carry"] = {"dtype": "bf16", "shape": ["tokens", HIDDEN], "class": "carry"}
    doc["buffers"]["draft_tokens"] = {"dtype": "i64", "shape": [block], "class": "output"}
    doc["buffers"]["draft.norm.weight"] = {"dtype": "bf16", "shape": [HIDDEN],
                                           "class": "weight"}
    doc["buffers"]["draft.markov_w1.weight"] = {"dtype": "bf16", "shape": [vocab, 4],
                                                "class": "weight"}
    states = [f"draft.kv.L{j}.{kv}" for j in range(layers) for kv in "kv"]
    params = (["in buffer<i64>", "in buffer<i64>"] + ["inout ptr"] * len(states)
              + ["inout buffer<bf16>", "in buffer<bf16>", "in buffer<bf16>", "out buffer<i64>"])
    doc["kernels"]["draft_step"] = {"params": params, "impl": {"steps": [{
        "symbol": "fake_draft", "params": params, "block": [1, 1, 1], "grid": [1, 1, 1],
        "args": [{"arg": i} for i in range(len(params))]}]}}
    args = [{"buf": "token_ids"}, {"buf": "positions"}] + [{"state": n} for n in states] + [
            {"buf": "carry"}, {"buf": "draft.norm.weight"}, {"buf": "draft.markov_w1.weight"},
            {"buf": "draft_tokens"}]
    for p in ("decode_spec", "draft", "draft_precompute"):
        doc["programs"][p] = {"dispatches": [{"kernel": "draft_step", "args": args}]}
    if accept_mask is not None:
        dt = {np.int64: "i64", np.int32: "i32"}
        for name, dtype, rows in NEXT:
            doc["buffers"][name] = {"dtype": dt[dtype], "shape": [block + rows],
                                    "class": "output"}
        params = ["in buffer<i64>"] + [f"out buffer<{dt[d]}>" for _, d, _ in NEXT] + ["i64"]
        doc["kernels"]["accept"] = {"params": params, "impl": {"steps": [{
            "symbol": "fake_accept", "params": params, "block": [32, 1, 1],
            "grid": [1, 1, 1], "args": [{"arg": i} for i in range(len(params))]}]}}
        doc["programs"]["verify"]["dispatches"].append({"kernel": "accept", "args": [
            {"buf": "predictions"}, *({"buf": n} for n, _, _ in NEXT), {"i64": accept_mask}]})
    return doc


def dspark_config(**over) -> dict:
    cfg = {"format": "kern-dspark", "version": 1, "target": "fake/model", "family": "llama",
           "target_layers": 30, "layers": 1, "block": 7, "tap_layers": [1, 7, 14, 20, 27],
           "markov_rank": 4, "mask_token_id": 3, "seed": 0, "trained": None}
    return cfg | over


def write_draft(path, tensors: dict) -> None:
    """A safetensors file of bf16 zeros: ``tensors`` name -> shape."""
    from kern_weights import SafetensorsWriter, Slot
    slots = [Slot(n, "bf16", tuple(s)) for n, s in tensors.items()]
    with SafetensorsWriter(path, slots, {"format": "pt"}) as w:
        for sl in slots:
            w.write(sl.name, np.zeros(sl.shape, np.uint16))


def write_bundle(d, vocab: int, config: dict | None = None, draft: dict | None = None,
                 accept_mask: int | None = None):
    """manifest.json, kernels/, dspark.json and draft.safetensors in folder ``d``."""
    import json
    d.mkdir(parents=True, exist_ok=True)
    (d / "manifest.json").write_text(json.dumps(dspark_manifest(vocab,
                                                                accept_mask=accept_mask)))
    (d / "kernels").mkdir(exist_ok=True)
    (d / "dspark.json").write_text(json.dumps(config or dspark_config()))
    write_draft(d / "draft.safetensors", draft if draft is not None else {
        "draft.norm.weight": [HIDDEN], "draft.markov_w1.weight": [vocab, 4]})
    return d / "manifest.json"


class _Ready:
    def __init__(self, value: np.ndarray) -> None:
        self.value = value

    def wait(self) -> np.ndarray:
        return self.value


class NullDSpark:
    """No model and no records, to time the DSpark loop's own host work: ``draft`` proposes
    1 … B, ``verify`` predicts every draft (all accepted) and continues with the last one."""

    def __init__(self, max_tokens: int = 16, block: int = 7) -> None:
        self.ids = np.zeros(max_tokens, np.int64)
        self.block_out = np.arange(1, block + 1, dtype=np.int64)
        self.t = 1

    def write(self, name: str, array: np.ndarray) -> None:
        if name == "token_ids":
            self.ids[:len(array)] = array

    def write_scalars(self, values: dict[str, int]) -> None:
        pass

    def copy(self, dst: str, src: str, symbols=None, *, dst_row: int = 0) -> None:
        if src == "draft_tokens":
            t = symbols["tokens"]
            self.ids[dst_row:dst_row + t] = self.block_out[:t]

    def run(self, program: str, symbols: dict[str, int], *, graph: bool = True) -> None:
        self.t = symbols["tokens"]

    def read_async(self, name: str, symbols=None) -> _Ready:
        t = self.t
        if name == "draft_tokens":
            return _Ready(self.block_out.copy())
        if name == "predictions":
            out = np.empty(t, np.int64)
            out[:t - 1] = self.ids[1:t]
            out[t - 1] = self.ids[t - 1]
            return _Ready(out)
        return _Ready(np.array([1], np.int64))

    def synchronize(self) -> None:
        pass

    def capture(self, program: str, symbols: dict[str, int]) -> None:
        pass

    def capture_sequence(self, ops, *, copy_kernel: bool = False) -> None:
        pass

    def run_sequence(self, ops, *, graph: bool = True, copy_kernel: bool = False) -> None:
        run_ops(self, ops, graph)
