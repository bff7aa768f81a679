"""``kern-run bench --batch``: N prompts through the engine (:mod:`kern_run.engine`) at
several concurrencies, against the same prompts through plain batch-1
:func:`kern_run.generate.generate` one at a time, in the same run on the same runtime.

- Prompts: natural-language (the ``--spec`` prompt sets' texts, encoded and cut or joined to
  ``prompt_len`` tokens) or token ids (:func:`id_prompts`); every request generates exactly
  ``steps`` tokens (EOS ignored on both sides, so every run has the same length).
- Closed loop per concurrency c: at most c requests in flight (fewer if the KV pool holds
  fewer whole reservations), the next submitted as one finishes; output tok/s = tokens
  delivered / (first submit → last finish); the engine's median step time per bucket and
  host time per step.
- Plain: tok/s = the same tokens / the sum of the generations' wall times (graph capture
  excluded).
- ``check``: every engine output against the plain tokens of its prompt; a divergence is
  reported with its first differing index (batched GEMMs may round differently from the
  batch-1 ones on a GPU; on the fake runtime any divergence is a bug)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..engine import Engine, EngineConfig, Request
from ..engine.pages import pages_for
from ..engine.sequence import reserve_tokens

CONCURRENCY = (1, 4, 16, 32, 64)


def id_prompts(n: int, length: int, vocab: int | None) -> list[list[int]]:
    """``n`` token-id prompts of ``length`` tokens, distinct and deterministic."""
    v = vocab or 32000
    return [[(7919 * i + 104729 * j + 13) % v for j in range(length)] for i in range(n)]


def text_prompts(tok, n: int, length: int) -> list[list[int]]:
    """``n`` prompts of exactly ``length`` tokens from the spec prompt sets' texts: prompt i
    starts at text i and joins the following texts until it is long enough."""
    from ..spec import load_prompt_sets
    texts = [p.text for ps in load_prompt_sets().values() for p in ps]
    encoded = [tok.encode(t) for t in texts]
    out = []
    for i in range(n):
        ids: list[int] = []
        k = i
        while len(ids) < length:
            ids += encoded[k % len(encoded)]
            k += 1
        out.append(ids[:length])
    return out


@dataclass
class ConcurrencyResult:
    concurrency: int
    in_flight: int              # the most requests in flight (≤ concurrency, pool)
    tokens: int
    seconds: float
    step_ms: dict[int, float]   # bucket -> median ms per step
    host_ms: float              # host ms per engine step
    capture_ms: float
    outputs: list[list[int]] = field(default_factory=list)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def plain_runs(rt, prompts: Sequence[Sequence[int]], *, steps: int, chunk: int,
               max_tokens: int, vocab: int | None, capacity: int | None = None,
               clock: Callable[[], float] = time.perf_counter
               ) -> tuple[list[list[int]], float]:
    """(tokens per prompt, seconds) of plain greedy generation, one prompt at a time;
    ``capacity``: the pool's slots (the plain path's identity table stops there)."""
    from ..generate import generate
    outs, secs = [], 0.0
    for p in prompts:
        t0 = clock()
        r = generate(rt, p, steps=steps, chunk=chunk, max_tokens=max_tokens, vocab=vocab,
                     capacity=capacity)
        secs += clock() - t0 - r.capture_s
        outs.append(r.tokens)
    return outs, secs


def in_flight_limit(cfg: EngineConfig, concurrency: int, prompt_len: int, steps: int,
                    n: int) -> int:
    """The most requests that can run at once: c, the prompts, tokens.max, and the whole
    reservations the pool holds (the table shows a lower one as "at most")."""
    per = pages_for(reserve_tokens(prompt_len, steps))
    return max(1, min(concurrency, n, cfg.max_tokens, (cfg.pages - 1) // per))


def engine_run(rt, cfg: EngineConfig, prompts: Sequence[Sequence[int]], *, steps: int,
               concurrency: int, clock: Callable[[], float] = time.perf_counter
               ) -> ConcurrencyResult:
    """All prompts through a fresh engine at ``concurrency`` (closed loop, graphs captured
    before the clock starts)."""
    c = in_flight_limit(cfg, concurrency, max(len(p) for p in prompts), steps, len(prompts))
    engine = Engine(rt, replace(cfg, max_seqs=c, buckets=None))
    capture_ms = engine.warmup()
    outs: list[list[int]] = [[] for _ in prompts]
    nxt = 0

    def submit() -> None:
        nonlocal nxt
        engine.submit(Request(str(nxt), tuple(prompts[nxt]), steps, ignore_eos=True))
        nxt += 1

    t0 = clock()
    while nxt < min(c, len(prompts)):
        submit()
    tokens = 0
    while engine.has_work():
        for ev in engine.step():
            if ev.token is not None:
                outs[int(ev.id)].append(ev.token)
                tokens += 1
            if ev.finish is not None and nxt < len(prompts):
                submit()
    secs = clock() - t0
    st = engine.stats()
    return ConcurrencyResult(concurrency, c, tokens, secs, st.step_ms, st.host_ms_per_step,
                             capture_ms, outs)


def plain_gap(rt, prompt: Sequence[int], at: int, cfg: EngineConfig) -> float:
    """The batch-1 top-1/top-2 logit gap where the plain run chose its token ``at`` (a
    replay to that token; its last decode's ``logits``): a divergence there is a bf16
    near-tie when the gap is small (issue 20: above 0.25 it is a bug)."""
    from ..generate import generate
    from ..spec.check import read_logits, top2
    generate(rt, prompt, steps=at + 1, chunk=cfg.chunk, max_tokens=cfg.max_tokens,
             vocab=cfg.vocab, capacity=cfg.capacity)
    return top2(read_logits(rt))[2]


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ (a length counts); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def measure(rt, cfg: EngineConfig, prompts: Sequence[Sequence[int]], *, steps: int,
            concurrency: Sequence[int] = CONCURRENCY, check: bool = False,
            plain_prompts: int | None = None, per_concurrency: int | None = None,
            clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Plain first (over the first ``plain_prompts`` prompts, default all: its tok/s is the
    baseline), then each concurrency over all prompts; with ``check``: per concurrency, the
    prompts run both ways whose engine output differs from the plain one, ``{prompt index:
    first differing index}``, and the plain run's logit gap there. ``per_concurrency`` k:
    concurrency c runs the first k x c prompts only (issue 20: >= 8 x c requests)."""
    plain, plain_s = plain_runs(rt, prompts[:plain_prompts], steps=steps, chunk=cfg.chunk,
                                max_tokens=cfg.max_tokens, vocab=cfg.vocab,
                                capacity=cfg.capacity, clock=clock)
    plain_tokens = sum(len(t) for t in plain)
    out: dict[str, Any] = {"prompts": len(prompts), "plain_prompts": len(plain), "steps": steps,
                           "plain": {"tokens": plain_tokens, "seconds": plain_s,
                                     "tok_s": plain_tokens / plain_s if plain_s else 0.0},
                           "engine": []}
    for c in concurrency:
        some = prompts[:per_concurrency * c] if per_concurrency else prompts
        r = engine_run(rt, cfg, some, steps=steps, concurrency=c, clock=clock)
        row = {"concurrency": c, "requests": len(some), "in_flight": r.in_flight,
               "tokens": r.tokens,
               "seconds": r.seconds, "tok_s": r.tok_s, "step_ms": r.step_ms,
               "host_ms": r.host_ms, "capture_ms": r.capture_ms}
        if check:
            row["divergences"] = {i: d for i, (e, p) in enumerate(zip(r.outputs, plain))
                                  if (d := first_difference(e, p)) is not None}
            row["gaps"] = {i: plain_gap(rt, prompts[i], d, cfg)
                           for i, d in row["divergences"].items() if d < len(plain[i])}
        out["engine"].append(row)
    return out


def batch_rows(rep, case: str, data: dict[str, Any]) -> None:
    """Table rows of :func:`measure`'s result into report ``rep`` (:class:`.Report`)."""
    pl = data["plain"]
    rep.add(case, f"plain batch-1 ({data.get('plain_prompts', data['prompts'])} prompts x "
                  f"{data['steps']} tokens)",
            f"{pl['tok_s']:,.1f} tok/s")
    for r in data["engine"]:
        steps = ", ".join(f"B{b} {ms:.3f}" for b, ms in r["step_ms"].items())
        note = f"step ms {steps}; host {r['host_ms']:.3f} ms/step"
        if "divergences" in r:
            d = r["divergences"]
            gaps = r.get("gaps", {})
            both = data.get("plain_prompts", data["prompts"])
            note += (f"; identical {both - len(d)}/{both}"
                     + ("" if not d else "; first differing index (plain gap) "
                        + ", ".join(f"#{i}@{k}" + (f" ({gaps[i]:.3f})" if i in gaps else "")
                                    for i, k in sorted(d.items())[:8])))
        speed = r["tok_s"] / pl["tok_s"] if pl["tok_s"] else 0.0
        cap = f" (at most {r['in_flight']})" if r["in_flight"] < r["concurrency"] else ""
        rep.add(case, f"engine c={r['concurrency']}{cap} output tok/s", f"{r['tok_s']:,.1f}",
                f"{speed:.2f}x plain", note=note)


def check_batch_options(prompts: int, prompt_len: int, source: str,
                        concurrency: Sequence[int], *, steps: int = 1,
                        plain_prompts: int | None = None, per_concurrency: int | None = None,
                        qwen3=None) -> None:
    """Refuse bad ``--batch`` options (one line each, naming the option), before the GPU."""
    from ..errors import KernRunError
    counts = (("--prompts", prompts), ("--prompt-len", prompt_len), ("--steps", steps),
              ("--plain-prompts", plain_prompts), ("--per-concurrency", per_concurrency))
    problems = [f"{name} must be at least 1 (got {v})" for name, v in counts
                if v is not None and v < 1]
    if source not in ("text", "ids"):
        problems.append(f"--prompt-source {source!r}: give text (the spec prompt sets' "
                        f"texts) or ids (token ids)")
    bad = [c for c in concurrency if c < 1]
    if not concurrency or bad:
        problems.append(f"--concurrency must be at least 1 (got {bad[0] if bad else 'none'})")
    if qwen3 is not None:
        if not (qwen3 / "manifest.json").is_file():
            problems.append(f"--qwen3 `{qwen3}`: no manifest.json there")
        elif source != "ids":
            problems.append("--batch --qwen3 runs seeded random weights: give "
                            "--prompt-source ids")
    if problems:
        raise KernRunError(*problems)


def qwen3_options(qwen3_dir, gpu: int):
    """RunOptions for the Qwen3-4B-shape example with the bench's seeded random weights
    (``$KERN_CACHE``, as ``kern-run bench --qwen3``). The tokenizer is the bundled
    SmolLM2's: random weights have no text, the prompts are token ids and the engine runs
    with ``ignore_eos``, so it only has to load."""
    from ..defaults import cache_dir, gguf_path, plan_file
    from ..runner import RunOptions
    from . import QWEN3_4B, export_weights
    from .torch_side import checkpoint_in_child
    manifest = qwen3_dir / "manifest.json"
    base = cache_dir() / "qwen3-4b-random"
    hf = checkpoint_in_child(base / "hf", QWEN3_4B)
    w = export_weights(manifest, plan_file(qwen3_dir), hf, base / "kern-weights.safetensors")
    return RunOptions(manifest=manifest, kernels=qwen3_dir / "kernels", weights=[w],
                      tokenizer=gguf_path(), gpu=gpu)


def run_batch(opts, *, prompts: int, prompt_len: int, source: str, steps: int,
              concurrency: Sequence[int], check: bool, plain_prompts: int | None = None,
              per_concurrency: int | None = None):
    """The GPU side of ``kern-run bench --batch`` on the model of ``opts`` (a
    :class:`kern_run.runner.RunOptions`; empty: the bundled default): a :class:`.Report`."""
    from ..engine import open_engine
    from . import Report
    rep = Report()
    opened = open_engine(opts, max_seqs=max(concurrency))
    try:
        e = opened.engine
        ids = (text_prompts(opened.tokenizer, prompts, prompt_len) if source == "text"
               else id_prompts(prompts, prompt_len, e.cfg.vocab))
        data = measure(e.rt, e.cfg, ids, steps=steps, concurrency=concurrency, check=check,
                       plain_prompts=plain_prompts, per_concurrency=per_concurrency)
    finally:
        opened.engine.close()
    data["model"] = opened.info.model
    data["capacity"] = opened.capacity_line
    rep.data["batch"] = data
    batch_rows(rep, f"batch {opened.info.model}", data)
    return rep
