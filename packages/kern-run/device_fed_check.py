"""GPU diagnosis (issue 16, session 33): do fed steps through mailboxes compute the same logits
as fed steps by stream operations, and is either way the same from pass to pass?

Session 33's first run of ``tests/test_fed_gpu.py`` found the mailbox way's greedy token
different at step 22 of 24 (random SmolLM2 weights); the test compared a fresh runtime's first
pass (stream operations) with its second (mailboxes). This script separates the causes: on one
runtime it runs passes of ``--steps`` fed steps after the same 16-token prefill, in the order
stream, stream, mailbox, mailbox, stream, mailbox-eager (the sequence queued op by op), and
prints for pairs of passes the first step whose logits differ (bitwise), the largest |Δ| there
and the first differing token. With ``--no-pdl`` also on a runtime loaded with PDL off.

Its first run (H100, session 33) answered: the mailbox way was bit-identical to the stream
operations' (and to itself, and op by op) in every pass; only a fresh runtime's first pass
differed from the later ones, from step 0. Cause: the prefill program writes the cache only
(no ``logits``, no ``next_token``), so fed steps started right after a whole-prompt prefill
took a stale ``next_token`` (the fresh buffer's, then the previous pass's). The passes now
start as ``generate`` does: a prefill of all but the last prompt token, then a decode of it.

    python3 packages/kern-run/device_fed_check.py [--steps 48]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from kern_manifest.contract import (DECODE, KV_LENS, LOGITS, NEXT_TOKEN, POSITIONS, PREFILL,
                                    SLOTS, SYMBOL, TOKEN_IDS)

ONE = {SYMBOL: 1}
PROMPT = [(17 * i + 5) % 49152 for i in range(16)]
ORDER = ["stream", "stream", "mailbox", "mailbox", "stream", "mailbox-eager"]
PAIRS = [(0, 1), (1, 2), (2, 3), (3, 4), (1, 4), (4, 5)]


def as_f32(x: np.ndarray) -> np.ndarray:
    """bf16 bits (any 2-byte dtype) as float32."""
    return (np.frombuffer(x.tobytes(), np.uint16).astype(np.uint32) << 16).view(np.float32)


def one_pass(rt, way: str, steps: int) -> tuple[list[int], list[np.ndarray]]:
    from kern_run.fed import MailboxFeed
    from kern_run.inputs import write_at
    n = len(PROMPT) - 1
    write_at(rt, PROMPT[:n], 0)
    rt.run(PREFILL, {SYMBOL: n}, graph=False)
    write_at(rt, PROMPT[n:], n)
    rt.run(DECODE, ONE, graph=False)                 # next_token: the first generated token
    feed = MailboxFeed.of(rt)
    tokens, logits = [], []
    for i in range(steps):
        pos = len(PROMPT) + i
        if way == "stream":
            rt.copy(TOKEN_IDS, NEXT_TOKEN, ONE)
            rt.write_scalars({POSITIONS: pos, SLOTS: pos, KV_LENS: pos + 1})
            rt.run(DECODE, ONE)
            tokens.append(int(rt.read(NEXT_TOKEN, ONE)[0]))
        else:
            tokens.append(int(feed.queue(pos, graph=way == "mailbox").wait()[0]))
        logits.append(as_f32(rt.read(LOGITS, ONE)))
    return tokens, logits


def compare(name: str, a: tuple, b: tuple) -> str:
    ta, la = a
    tb, lb = b
    step = next((i for i, (x, y) in enumerate(zip(la, lb)) if x.tobytes() != y.tobytes()), None)
    tok = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), None)
    if step is None:
        return f"{name}: logits bit-identical at every step; tokens {'identical' if tok is None else f'differ at {tok}'}"
    d = np.abs(la[step] - lb[step])
    return (f"{name}: logits first differ at step {step} (max |d| {d.max():.4g}, "
            f"{int((d > 0).sum())} entries); tokens {'identical' if tok is None else f'first differ at {tok}'}")


def diagnose(pdl: bool, steps: int) -> int:
    from kern_manifest import read
    from kern_manifest.contract import check_manifest
    from kern_runtime import Runtime
    from kern_run.bench.random_weights import random_smollm2
    from kern_run.capacity import choose
    from kern_run.fed import MailboxFeed
    b = random_smollm2()
    cap = choose(None, check_manifest(read(b.manifest)))
    bad = 0
    with Runtime.load(b.manifest, b.kernels, weights=b.weights, capacity=cap.load,
                      progress=None, pdl=pdl) as rt:
        MailboxFeed.of(rt).capture()
        runs = [one_pass(rt, way, steps) for way in ORDER]
        print(f"== PDL {'on' if pdl else 'off'}: {steps} fed steps a pass; passes {ORDER}; "
              f"distinct tokens per pass {[len(set(t)) for t, _ in runs]}")
        moving = sum(x.tobytes() != y.tobytes() for x, y in zip(runs[1][1], runs[1][1][1:]))
        print(f"   logits change from step to step in {moving} of {steps - 1} steps")
        for i, j in PAIRS:
            line = compare(f"   pass {i} ({ORDER[i]}) vs {j} ({ORDER[j]})", runs[i], runs[j])
            bad += "differ" in line
            print(line)
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--no-pdl", action="store_true", help="also with PDL off")
    a = ap.parse_args(argv)
    bad = diagnose(True, a.steps)
    if a.no_pdl:
        bad += diagnose(False, a.steps)
    print("done:", "OK" if not bad else f"{bad} pairs differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
