"""Device check of the batched engine (issue 20) on the bundled SmolLM2, beyond
``kern-run bench --batch --check``: 16 identical prompts admitted together, and GPU memory
over 1,000 admitted and finished sequences (random prompt lengths and max_tokens, aborts).

Run on the GPU machine from the repository root (PYTHONPATH as device_run.sh sets it):
    python3 packages/kern-run/device_engine.py [--sequences 1000]
Prints one table; exits 1 when the identical prompts differ, the pool does not end empty,
or the free GPU memory moved by more than one MiB between the 10 % sample and the last."""

from __future__ import annotations

import argparse
import random
import sys
import time


def identical_prompts(engine, tok, n: int = 16, steps: int = 64) -> tuple[bool, list[int]]:
    from kern_run.engine import Request
    ids = tuple(tok.encode("The history of the printing press begins"))
    for i in range(n):
        engine.submit(Request(f"same{i}", ids, steps, ignore_eos=True))
    outs: dict[str, list[int]] = {f"same{i}": [] for i in range(n)}
    while engine.has_work():
        for ev in engine.step():
            if ev.token is not None:
                outs[ev.id].append(ev.token)
    first = outs["same0"]
    return all(o == first for o in outs.values()) and len(first) == steps, first


def soak(engine, vocab: int, sequences: int, conc: int = 32, seed: int = 0) -> list[tuple]:
    """Closed loop of ``sequences`` requests; every 10 %: (done, free GPU bytes, pages used)."""
    from kern_runtime import gpu_memory

    from kern_run.engine import Request
    rng = random.Random(seed)
    done = submitted = 0
    live: set[str] = set()
    samples = [(0, gpu_memory(0)[0], engine.stats().pages_used)]
    every = max(1, sequences // 10)
    while done < sequences:
        while submitted < sequences and len(live) < conc:
            n = rng.choice((1, 15, 16, 17, rng.randint(2, 300)))
            prompt = tuple(rng.randrange(vocab) for _ in range(n))
            rid = f"s{submitted}"
            engine.submit(Request(rid, prompt, rng.randint(1, 48)))
            live.add(rid)
            submitted += 1
        if live and rng.random() < 0.05:
            engine.abort(rng.choice(sorted(live)))
        for ev in engine.step():
            if ev.finish is not None:
                live.discard(ev.id)
                done += 1
                if done % every == 0:
                    samples.append((done, gpu_memory(0)[0], engine.stats().pages_used))
    return samples


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sequences", type=int, default=1000)
    a = ap.parse_args()
    from kern_run.engine import open_engine
    from kern_run.runner import RunOptions
    opened = open_engine(RunOptions(), max_seqs=64)
    e = opened.engine
    try:
        t0 = time.perf_counter()
        e.warmup()
        ok_same, toks = identical_prompts(e, opened.tokenizer)
        print(f"16 identical prompts: {'identical' if ok_same else 'DIFFER'} "
              f"({len(toks)} tokens each): {opened.tokenizer.decode(toks)[:80]!r}")
        samples = soak(e, opened.info.vocab, a.sequences)
        st = e.stats()
        print(f"{a.sequences} sequences in {time.perf_counter() - t0:.1f} s; pages total "
              f"{st.pages_total}, used at the end {st.pages_used}, reserved {st.pages_reserved}")
        print("| finished | free GPU MiB | pages used |\n|---:|---:|---:|")
        for done, free, used in samples:
            print(f"| {done} | {free / 2**20:,.1f} | {used} |")
        # from the first sample on (after 10 % of the sequences): the first steps of each
        # bucket allocate once (2.00 MiB on the H200, 2026-12-02), a leak would keep growing
        drift = abs(samples[-1][1] - samples[1][1])
        print(f"free-memory drift, start -> 10 %: "
              f"{(samples[0][1] - samples[1][1]) / 2**20:.2f} MiB (one-off); "
              f"10 % -> last: {drift / 2**20:.2f} MiB")
        ok = ok_same and st.pages_used == 0 and st.pages_reserved == 0 and drift <= 2**20
        return 0 if ok else 1
    finally:
        e.close()


if __name__ == "__main__":
    sys.exit(main())
