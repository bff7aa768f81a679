"""Helpers of the engine's CPU tests: the batch-1 reference, a workload driver, and the
checks every workload must pass."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from kern_run.engine import Engine, EngineConfig, FakePagedRuntime, Refused, Request, TokenEvent
from kern_run.generate import generate

VOCAB = 24
TOKENS_MAX = 16


@lru_cache(maxsize=None)
def reference(prompt: tuple[int, ...], max_tokens: int, eos: frozenset[int],
              vocab: int = VOCAB, capacity: int = 4096) -> tuple[tuple[int, ...], int | None]:
    """(tokens, stop token or None) of plain batch-1 greedy ``generate`` over a fresh fake.

    The plain path's inputs do not write slots / kv_lens / block_table yet (being changed
    concurrently); the fake's ``plain`` mode gives batch 1's values (slot = position, an
    identity table) for inputs never written, and uses the written ones once they are."""
    rt = FakePagedRuntime(capacity, max_tokens=TOKENS_MAX, vocab=vocab, plain=True, seed=99)
    r = generate(rt, list(prompt), steps=max_tokens, chunk=8, max_tokens=TOKENS_MAX, eos=eos,
                 vocab=vocab)
    return tuple(r.tokens), r.eos_token


def request_eos(req: Request, eos: frozenset[int]) -> frozenset[int]:
    return frozenset(req.stop_token_ids) | (frozenset() if req.ignore_eos else eos)


@dataclass
class Arrival:
    step: int
    req: Request
    abort_after: int | None = None      # abort once this many tokens were delivered
    abort_in_prefill: bool = False      # abort once part of the prompt is prefilled


@dataclass
class Outcome:
    tokens: dict[str, list[int]] = field(default_factory=dict)
    events: dict[str, list[TokenEvent]] = field(default_factory=dict)
    refused: dict[str, Refused] = field(default_factory=dict)
    aborted: set[str] = field(default_factory=set)
    steps: int = 0
    max_waiting: int = 0                # sequences waiting after a step, at most


def drive(engine: Engine, arrivals: list[Arrival], *, max_steps: int = 10_000) -> Outcome:
    """Submit each arrival at its step, abort as asked, step until no work is left."""
    out = Outcome()
    by_step: dict[int, list[Arrival]] = {}
    for a in arrivals:
        by_step.setdefault(a.step, []).append(a)
    watch = {a.req.id: a for a in arrivals if a.abort_after is not None or a.abort_in_prefill}
    last = max(by_step, default=0)
    k = 0
    while k <= last or engine.has_work():
        assert k < max_steps, "the engine did not finish its work"
        for a in by_step.get(k, []):
            out.tokens[a.req.id], out.events[a.req.id] = [], []
            try:
                engine.submit(a.req)
            except Refused as err:
                out.refused[a.req.id] = err
        for rid, a in list(watch.items()):
            seq = engine._live.get(rid)
            got = len(out.tokens.get(rid, []))
            mid_prefill = seq is not None and 0 < seq.prefilled < seq.n - 1
            if (a.abort_after is not None and got >= a.abort_after) or \
                    (a.abort_in_prefill and mid_prefill):
                engine.abort(rid)
                out.aborted.add(rid)
                del watch[rid]
        for ev in engine.step():
            out.events[ev.id].append(ev)
            if ev.token is not None:
                out.tokens[ev.id].append(ev.token)
        out.max_waiting = max(out.max_waiting, len(engine.sched.waiting))
        k += 1
    out.steps = k
    return out


def check_outcome(engine: Engine, arrivals: list[Arrival], out: Outcome) -> None:
    """Every request: exactly one finish, last; tokens == the batch-1 reference (a prefix of
    it when aborted); every page free at the end."""
    cfg = engine.cfg
    for a in arrivals:
        rid, req = a.req.id, a.req
        if rid in out.refused:
            assert out.events[rid] == []
            continue
        evs = out.events[rid]
        finishes = [e for e in evs if e.finish is not None]
        assert len(finishes) == 1 and evs[-1] is finishes[0], (rid, evs)
        fin = finishes[0]
        ref, stop = reference(req.prompt, req.max_tokens, request_eos(req, cfg.eos), cfg.vocab)
        got = out.tokens[rid]
        if fin.finish == "abort":
            assert rid in out.aborted
            assert tuple(got) == ref[:len(got)], (rid, got, ref)
            assert fin.token is None
            continue
        assert tuple(got) == ref, (rid, got, ref)
        if stop is not None:
            assert (fin.finish, fin.token, fin.stop_token) == ("stop", None, stop)
        else:
            assert fin.finish == "length" and fin.token == ref[-1] and len(got) == req.max_tokens
    pool = engine.pool
    assert pool.free_count == pool.total
    assert all(pool._ref[p] == 0 for p in range(1, pool.pages))
    assert not engine.has_work() and engine._live == {}
    assert engine.rt.uncaptured_graphs == 0     # every graph captured before its first run


def make_engine(capacity: int, **kw) -> Engine:
    rt = FakePagedRuntime(capacity, max_tokens=TOKENS_MAX, vocab=VOCAB,
                          seed=kw.pop("seed", 1), table_pages=kw.get("table_pages") or None)
    kw.setdefault("vocab", VOCAB)
    kw.setdefault("max_tokens", TOKENS_MAX)
    kw.setdefault("max_seqs", TOKENS_MAX)
    return Engine(rt, EngineConfig(capacity=capacity, **kw))
