"""GPU probe (issue 16, plan item 3): what the work between two decode graphs costs.

``kern-run bench`` reports ``host+gaps``: a token of the generation loop minus a decode graph
replayed back to back (16–20 µs on an H100). Session 32 replaced the fed step's three staged
position copies by one store operation (``Runtime.write_scalars``) and measured no change, so
the copies are not where those microseconds go. This probe replays the SmolLM2 example's
decode graph (random weights of its shape, as ``kern-run bench --random-weights``) with each
kind of between-graph work added alone, to find where they do go.

    python3 packages/kern-run/device_feed.py [--steps 200] [--reps 7]

Each variant queues ``steps`` decode graphs with its extra work per step, then waits; the
figure is the median over ``reps`` of (wall time / steps) minus the bare replay's, in µs.
Variants (per step, in queue order):

- ``copy``: the token copy (``copy token_ids <- next_token``);
- ``scalars``: the positions as one store operation;
- ``staged``: the positions as three staged copies (the way before session 32);
- ``read``: a queued read of ``next_token`` after the graph, waited one step later (the
  loop's pipelining: the host waits for token k while step k+1 is queued);
- ``fed``: copy + scalars + graph + read, the generation loop's step;
- ``fed-sync``: as ``fed`` but waiting for each read at once (no step queued ahead);
- ``event``: an event recorded after the graph, waited one step later;
- ``mailbox``: the fed step as ONE sequence graph: the copy kernel takes the token from
  ``next_token`` and the positions from a mailbox (mapped host memory the host wrote), the
  decode, the copy kernel puts ``next_token`` into the mailbox; an event after it, waited
  one step later (two mailboxes in turn);
- ``mailbox4``: four such fed steps in ONE sequence graph (each its own 32 bytes of the
  mailbox; the host knows the positions ahead), per step: fewer graph boundaries and events.

First, a check: 48 fed steps from the same prefill the generation loop's way and each
mailbox way must give the same tokens.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from kern_manifest.contract import KV_LENS, NEXT_TOKEN, POSITIONS, SLOTS, SYMBOL, TOKEN_IDS

ONE = {SYMBOL: 1}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args(argv)
    from kern_manifest import read
    from kern_manifest.contract import check_manifest
    import numpy as np
    from kern_runtime import Copy, Load, Run, Runtime, Store
    from kern_run.bench.random_weights import random_smollm2
    from kern_run.capacity import choose
    from kern_run.inputs import write_at
    b = random_smollm2()
    cap = choose(None, check_manifest(read(b.manifest)))
    with Runtime.load(b.manifest, b.kernels, weights=b.weights, capacity=cap.load,
                      progress=None) as rt:
        write_at(rt, [1] * 16, 0)
        rt.run("prefill", {SYMBOL: 16}, graph=False)
        pos = 16

        def scalars(staged: bool) -> None:
            rt.stream_writes = not staged
            rt.write_scalars({POSITIONS: pos, SLOTS: pos, KV_LENS: pos + 1})
            rt.stream_writes = True

        def fed_ops(bx, k: int) -> tuple:
            """k fed steps in one sequence; step j's 32 bytes at 32 j of the mailbox."""
            return sum(((Copy.of(TOKEN_IDS, NEXT_TOKEN, ONE),
                         Load.of(POSITIONS, bx, 32 * j, ONE), Load.of(SLOTS, bx, 32 * j + 8, ONE),
                         Load.of(KV_LENS, bx, 32 * j + 16, ONE), Run.of("decode", ONE),
                         Store.of(bx, NEXT_TOKEN, 32 * j + 24, ONE)) for j in range(k)), ())

        boxes = {k: [rt.mailbox(32 * k), rt.mailbox(32 * k)] for k in (1, 4)}
        seqs = {k: [fed_ops(bx, k) for bx in boxes[k]] for k in (1, 4)}

        def mailbox_step(i: int, p: int, k: int = 1, step: int = 1) -> None:
            """Queue the i-th sequence of k fed steps, at positions p, p + step, … (timing
            replays one position: ``step`` 0)."""
            bx = boxes[k][i % 2]
            bx.wait()
            for j in range(k):
                q = p + j * step
                bx.view(np.int64, 32 * j, 2)[:] = q
                bx.view(np.int32, 32 * j + 16)[0] = q + 1
            rt.run_sequence(seqs[k][i % 2], copy_kernel=True)
            bx.mark()

        def tokens(way: str, n: int = 48) -> list[int]:
            # as generate: the prefill writes the cache only, the last prompt token's decode
            # makes the first next_token the fed steps take
            write_at(rt, [1] * 15, 0)
            rt.run("prefill", {SYMBOL: 15}, graph=False)
            write_at(rt, [1], 15)
            rt.run("decode", ONE, graph=False)
            out = []
            k = 4 if way == "mailbox4" else 1
            for i in range(n // k):
                if way.startswith("mailbox"):
                    mailbox_step(i, 16 + i * k, k)
                    bx = boxes[k][i % 2]
                    bx.wait()
                    out += [int(bx.view(np.int64, 32 * j + 24)[0]) for j in range(k)]
                else:
                    rt.copy(TOKEN_IDS, NEXT_TOKEN, ONE)
                    rt.write_scalars({POSITIONS: 16 + i, SLOTS: 16 + i, KV_LENS: 17 + i})
                    rt.run("decode", ONE)
                    out.append(int(rt.read(NEXT_TOKEN, ONE)[0]))
            return out
        fed_tokens = tokens("fed")
        for way in ("mailbox", "mailbox4"):
            got = tokens(way)
            print(f"check: 48 fed steps, {way} tokens "
                  f"{'identical' if got == fed_tokens else 'DIFFER'} ({len(set(got))} distinct)")
            if got != fed_tokens:
                print(f"  fed     {fed_tokens}\n  {way} {got}")

        def variant(name: str) -> float:
            pending = None
            t0 = time.perf_counter()
            for i in range(a.steps):
                if name.startswith("mailbox"):
                    k = 4 if name == "mailbox4" else 1
                    if i % k:
                        continue
                    mailbox_step(i // k, pos, k, step=0)
                    if i:
                        boxes[k][(i // k - 1) % 2].wait()
                    continue
                if name in ("copy", "fed", "fed-sync"):
                    rt.copy(TOKEN_IDS, NEXT_TOKEN, ONE)
                if name in ("scalars", "fed", "fed-sync"):
                    scalars(False)
                if name == "staged":
                    scalars(True)
                rt.run("decode", ONE)
                if name in ("read", "fed", "fed-sync"):
                    nxt = rt.read_async(NEXT_TOKEN, ONE)
                    if name == "fed-sync":
                        nxt.wait()
                    elif pending is not None:
                        pending.wait()
                    pending = nxt
                if name == "event":
                    boxes[1][i % 2].mark()
                    if i:
                        boxes[1][(i - 1) % 2].wait()
            rt.synchronize()
            for bx in boxes[1] + boxes[4]:
                bx.wait()
            return (time.perf_counter() - t0) / a.steps * 1e6

        names = ["bare", "copy", "scalars", "staged", "read", "fed", "fed-sync", "event",
                 "mailbox", "mailbox4"]
        for n in names:                       # warm-up: graphs, staging, read slots
            variant(n)
        samples: dict[str, list[float]] = {n: [] for n in names}
        for _ in range(a.reps):               # interleaved, so drift hits every variant alike
            for n in names:
                samples[n].append(variant(n))
        bare = statistics.median(samples["bare"])
        print(f"decode graph replayed back to back: {bare:.2f} µs/step "
              f"(median of {a.reps} x {a.steps} steps)")
        print(f"{'variant':10s} {'µs/step':>9s} {'added':>8s}  spread")
        for n in names:
            m = statistics.median(samples[n])
            print(f"{n:10s} {m:9.2f} {m - bare:+8.2f}  {min(samples[n]):.2f}–{max(samples[n]):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
