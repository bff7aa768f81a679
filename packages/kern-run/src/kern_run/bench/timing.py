"""The kern side's timed loops of ``kern-run bench``: decode ms/token over generations,
prefill throughput, a graph replayed back to back. Host clocks around queued GPU work,
medians over repetitions; the rows are made by the bench (:mod:`kern_run.bench`)."""

from __future__ import annotations

import statistics
import time


def median_ms(samples: list[float]) -> float:
    """The median of ``samples`` (seconds), in milliseconds."""
    return 1000 * statistics.median(samples)


def kern_decode(rt, max_tokens: int, *, steps: int, reps: int, vocab: int | None,
                capacity: int | None = None, fixed: bool = False) -> dict:
    """Median decode ms/token over ``reps`` generations of ``steps`` tokens (no EOS), after a
    warm-up; GPU ms per back-to-back decode graph; host ms per step (the difference).
    ``capacity``/``fixed``: the KV limit (a 16-token prompt + ``steps`` must fit).
    The generations feed their steps through mailboxes (:mod:`kern_run.fed`, the default);
    interleaved with each, one whose fed steps queue a token copy, the positions and a read
    between the graphs instead (the way before session 33): ``decode_ms_streamops``, and
    whether its tokens were the same."""
    from ..generate import generate
    prompt = [(17 * i + 5) % (vocab or 1000) for i in range(16)]

    def run(mailboxes: bool = False):
        return generate(rt, prompt, steps=steps, chunk=max_tokens, max_tokens=max_tokens,
                        vocab=vocab, capacity=capacity, fixed_context=fixed,
                        mailboxes=mailboxes)
    run(True), run()
    pairs = [(run(True), run()) for _ in range(reps)]
    per_tok = [a.decode_s / a.decode_tokens for a, _ in pairs]
    ops = [b.decode_s / b.decode_tokens for _, b in pairs]
    same = all(a.tokens == b.tokens for a, b in pairs)
    k = max(50, steps)
    rt.synchronize()
    t0 = time.perf_counter()
    for _ in range(k):
        rt.run("decode", {"tokens": 1})
    rt.synchronize()
    gpu = (time.perf_counter() - t0) / k
    ms = median_ms(per_tok)
    return {"decode_ms": ms, "decode_gpu_ms": 1000 * gpu, "host_ms": ms - 1000 * gpu,
            "samples_ms": [1000 * s for s in per_tok], "decode_ms_streamops": median_ms(ops),
            "streamops_same_tokens": same}


def kern_prefill(rt, max_tokens: int, n: int, reps: int, vocab: int | None,
                 capacity: int | None = None, fixed: bool = False) -> dict:
    from ..generate import generate
    chunk = min(n, max_tokens)
    prompt = [(31 * i + 7) % (vocab or 1000) for i in range(n + 1)]
    run = lambda: generate(rt, prompt, steps=1, chunk=chunk, max_tokens=max_tokens,  # noqa: E731
                           vocab=vocab, capacity=capacity, fixed_context=fixed)
    run()
    s = [run().prefill_s for _ in range(reps)]
    return {"prefill_ms": median_ms(s), "prefill_tok_s": n / statistics.median(s), "chunk": chunk,
            "tokens": n}


def kern_graph_ms(rt, program: str, symbols: dict[str, int], k: int = 50) -> float:
    rt.run(program, symbols)
    rt.synchronize()
    t0 = time.perf_counter()
    for _ in range(k):
        rt.run(program, symbols)
    rt.synchronize()
    return 1000 * (time.perf_counter() - t0) / k
