#!/usr/bin/env python3
"""Issue 7's greedy check on the GPU machine: kern-run's own caller path against transformers,
SmolLM2-135M-Instruct (the bundled default), the same GGUF weights, the same GPU.

    python3 packages/kern-run/device_greedy.py [--steps 64] [--out DIR]

Per prompt (the five of ``tests/test_gpu.py``), plain and as a chat (kern-run's ChatML
rendering; both sides get the same token ids):

- kern: :func:`kern_run.generate.generate`, the loop ``kern-run`` runs (graphs, chunked
  prefill of 512, greedy on the GPU), ``--steps`` tokens with no EOS stop;
- transformers, bf16, eager attention, loaded from the same GGUF: a greedy loop over a
  dynamic cache (argmax of each step's logits; not ``generate``, whose ``min_new_tokens``
  would mask EOS and change the argmax), the same number of tokens;
- at the first divergence (if any): the reference's logits over the common prefix, its
  top-1/top-2 margin and ``gap`` = reference logit of its top-1 minus that of kern's token;
  the divergence is a near-tie if ``gap`` <= ``--near`` (0.5 logits, the device checks'
  margin). Tokens after a divergence continue different texts and are not compared.

Also compares kern-run's prompt token ids with transformers' GGUF tokenizer. Prints a table;
writes $OUT/greedy.json; exits 1 if a divergence is not a near-tie or the ids differ."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import NamedTuple

#: A divergence is a bf16 near-tie if the reference prefers its own token by at most this.
NEAR = 0.5
PROMPTS = ["The capital of France is", "Write a haiku about the sea.",
           "List three prime numbers:", "Explain what a GPU is in one sentence.",
           "Once upon a time, in a small village,"]


class Case(NamedTuple):
    prompt: int
    chat: bool
    n_ids: int
    ids_equal: bool          # kern-run's prompt ids == transformers' tokenizer's
    same: int                # leading generated tokens identical
    total: int
    margin: float | None     # reference top-1/top-2 margin at the first divergence
    gap: float | None        # reference logit(top-1) - logit(kern's token) there
    kern_text: str


def first_divergence(a: list[int], b: list[int]) -> int:
    """Index of the first position where ``a`` and ``b`` differ (len if none)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def case_ok(c: Case, near: float = NEAR) -> bool:
    return c.ids_equal and (c.same == c.total or (c.gap is not None and c.gap <= near))


def lines(cases: list[Case], near: float = NEAR) -> list[str]:
    out = ["prompt  chat  ids  ids==HF  identical  ref_margin  gap(ref top1 - kern tok)  "
           "judged  kern text"]
    for c in cases:
        m = "" if c.margin is None else f"{c.margin:.3f}"
        g = "" if c.gap is None else f"{c.gap:.3f}"
        out.append(f"{c.prompt:6d}  {'yes' if c.chat else 'no':>4}  {c.n_ids:3d}  "
                   f"{str(c.ids_equal):>7}  {c.same:4d}/{c.total:<4d}  {m:>10}  {g:>24}  "
                   f"{'ok' if case_ok(c, near) else 'BAD':>6}  {c.kern_text!r}")
    n_same = sum(c.same == c.total for c in cases)
    ties = [c for c in cases if c.same < c.total]
    out.append(f"summary: {n_same}/{len(cases)} cases identical over {cases[0].total if cases else 0} "
               f"tokens; {len(ties)} diverge, {sum(case_ok(c, near) for c in ties)} of them at a "
               f"near-tie (gap <= {near}); bad cases: {sum(not case_ok(c, near) for c in cases)}")
    return out


def long_text(tok, n: int) -> str:
    """Passages of the shipped speculation prompt set (HumanEval and ShareGPT, public), in
    file order, joined until the text encodes to at least ``n`` tokens."""
    from kern_run.spec.prompts import load_prompt_sets
    parts: list[str] = []
    for p in (p for ps in load_prompt_sets().values() for p in ps):
        parts.append(p.text)
        if len(tok.encode("\n\n".join(parts))) >= n:
            return "\n\n".join(parts)
    raise SystemExit(f"the prompt set has fewer than {n} tokens")


def chunk_check(rt, ids: list[int], steps: int, info, limit: int, generate) -> tuple[bool, str]:
    """kern's greedy tokens for ``ids`` with prefill chunks of 512, of 1, and eagerly: (all
    three equal, the line to print)."""
    runs = {name: generate(rt, ids, steps=steps, chunk=chunk, max_tokens=info.max_tokens,
                           vocab=info.vocab, capacity=limit, eager=eager,
                           fixed_context=info.context is not None).tokens
            for name, chunk, eager in (("chunk512", 512, False), ("chunk1", 1, False),
                                       ("eager", 512, True))}
    base = runs["chunk512"]
    same = {k: first_divergence(v, base) for k, v in runs.items()}
    ok = all(v == len(base) for v in same.values())
    return ok, f"{'AGREE' if ok else 'DIFFER'} {same} of {len(base)} tokens"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--near", type=float, default=NEAR)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")))
    ap.add_argument("--long", type=int, default=0,
                    help="also a plain prompt of at least this many tokens (passages of "
                         "kern_run/spec/prompts.json joined), and the chunking check on its "
                         "first 1500 tokens: --chunk 512, --chunk 1 and --eager must agree "
                         "(else exit 1)")
    ap.add_argument("--only-long", action="store_true", help="skip the five short prompts")
    args = ap.parse_args(argv)
    t0 = time.monotonic()

    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

    from kern_manifest import load
    from kern_runtime import Runtime

    from kern_run import defaults
    from kern_manifest.contract import check_manifest
    from kern_run.generate import generate
    from kern_run import capacity as CAP
    from kern_run.tokenizer import load_tokenizer

    b = defaults.bundled_default()
    vm = load(b.manifest)
    info = check_manifest(vm.manifest)
    tok = load_tokenizer(b.tokenizer)
    cap = CAP.choose(None, info)
    limit, load_cap = cap.limit, cap.load
    print(cap.line())
    gdir, gname = str(b.tokenizer.parent), b.tokenizer.name
    hf_tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
    ref = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.bfloat16,
                                               attn_implementation="eager").cuda().eval()
    print(f"reference loaded ({time.monotonic() - t0:.1f} s)")

    def ref_greedy(ids: list[int], steps: int) -> list[int]:
        cache, out = DynamicCache(), []
        x = torch.tensor([ids], device="cuda")
        with torch.no_grad():
            for _ in range(steps):
                logits = ref(input_ids=x, past_key_values=cache, use_cache=True).logits[0, -1]
                out.append(int(logits.argmax()))
                x = torch.tensor([[out[-1]]], device="cuda")
        return out

    def ref_logits(ids: list[int]) -> np.ndarray:
        with torch.no_grad():
            return ref(torch.tensor([ids], device="cuda")).logits[0, -1].float().cpu().numpy()

    cases: list[Case] = []
    with Runtime.load(vm, b.kernels, weights=b.weights, capacity=load_cap,
                      progress=None) as rt:
        todo = [] if args.only_long else [(pi, p, chat) for pi, p in enumerate(PROMPTS)
                                          for chat in (False, True)]
        chunks_ok = True
        if args.long:
            todo.append((len(PROMPTS), long_text(tok, args.long), False))
            chunks_ok, line = chunk_check(rt, tok.encode(long_text(tok, 1500))[:1500],
                                          args.steps, info, limit, generate)
            print("chunking (1500-token prompt): " + line)
        for pi, p, chat in todo:
            text = tok.chat_prompt(p) if chat else p
            ids = tok.encode(text)
            hf_ids = hf_tok(text)["input_ids"]
            k = generate(rt, ids, steps=args.steps, chunk=512, max_tokens=info.max_tokens,
                         vocab=info.vocab, capacity=limit,
                         fixed_context=info.context is not None).tokens
            r = ref_greedy(ids, args.steps)
            j = first_divergence(k, r)
            margin = gap = None
            if j < len(r):
                lr = ref_logits(ids + r[:j])
                top = np.sort(lr)[-2:]
                margin, gap = float(top[1] - top[0]), float(lr[r[j]] - lr[k[j]])
            cases.append(Case(pi, chat, len(ids), ids == hf_ids, j, len(r), margin, gap,
                              tok.decode(k[:16])))
            print(f"[{time.monotonic() - t0:6.1f} s] prompt {pi} chat={chat}: {j}/{len(r)}")
    print("\n".join(lines(cases, args.near)))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "greedy.json").write_text(json.dumps(
        {"cases": [c._asdict() for c in cases], "steps": args.steps, "near": args.near}))
    return 0 if chunks_ok and all(case_ok(c, args.near) for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
