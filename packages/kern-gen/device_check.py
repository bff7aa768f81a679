#!/usr/bin/env python3
"""GPU correctness of a kern-gen Llama-family manifest against transformers, same weights.

    python3 packages/kern-gen/device_check.py --example examples/smollm2-135m \
        --gguf /tmp/smollm2.gguf [--out DIR]

1. exports the manifest's weights from the GGUF (`kern_gen.export`, with the example's plan);
2. loads transformers' model from the same GGUF (dequantised, bf16, CUDA, eager attention);
3. per prompt of n tokens: kern runs `prefill` on the first p tokens (several p per prompt:
   p = 0 skips prefill, p = 1 is a one-row prefill, larger p use chunks of up to `--chunk`),
   then `decode` teacher-forced on every remaining prompt token; each decode's logits are
   compared with the reference's full-sequence logits at that position: relative L2 error,
   argmax agreement, and the reference top-1/top-2 margin where they disagree;
4. greedy: `--gen` tokens by kern's `next_token` vs transformers' `generate` (greedy), and
   the reference margin at the first divergence (a bf16 near-tie explains one);
5. prints a table; exits 1 if an argmax disagreement happens where the reference margin is
   large (> 0.5 logits) or a relative error exceeds 5 %.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "Once upon a time, in a small village at the edge of a great forest, there lived an old "
    "clockmaker who had never once left the valley. Every morning he",
    "List three prime numbers greater than ten: 11,",
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--example", type=Path, default=Path("examples/smollm2-135m"))
    ap.add_argument("--gguf", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")))
    ap.add_argument("--gen", type=int, default=24)
    ap.add_argument("--chunk", type=int, default=16)
    args = ap.parse_args()
    t_start = time.monotonic()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kern_gen.export.plan import Plan
    from kern_gen.export.run import export, read_manifest
    from kern_gen.export.sources import open_source
    from kern_runtime import Runtime, from_bf16

    ex = args.example
    weights = args.out / "kern-weights.safetensors"
    man = read_manifest(ex / "manifest.json")
    s = export(man, open_source(gguf=args.gguf), weights, Plan.read(ex / "export-plan.json"))
    print(f"export: {s.tensors} tensors, {s.bytes / 2**20:.1f} MiB to {weights} in {s.seconds:.1f} s")

    gdir, gname = str(args.gguf.parent), args.gguf.name
    tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
    ref = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.bfloat16,
                                               attn_implementation="eager").cuda().eval()
    print(f"reference loaded ({time.monotonic() - t_start:.1f} s)")

    rt = Runtime.load(ex / "manifest.json", ex / "kernels", weights=[str(weights)])
    print(rt.summary())
    tmax = man.symbols["tokens"].max

    def kern_prefill(ids: list[int], p0: int) -> None:
        done = 0
        while done < len(ids):
            n = min(args.chunk, tmax, len(ids) - done)
            rt.write("token_ids", np.array(ids[done:done + n], np.int64))
            rt.write("positions", np.arange(p0 + done, p0 + done + n, dtype=np.int64))
            rt.write("pos0", np.array([p0 + done], np.int32))
            rt.run("prefill", {"tokens": n})
            done += n

    def kern_decode(tid: int, pos: int) -> tuple[np.ndarray, int]:
        rt.write("token_ids", np.array([tid], np.int64))
        rt.write("positions", np.array([pos], np.int64))
        rt.write("pos0", np.array([pos], np.int32))
        rt.run("decode", {"tokens": 1})
        logits = from_bf16(rt.read("logits")).reshape(-1).astype(np.float32)
        return logits, int(rt.read("next_token").reshape(-1)[0])

    rows, bad = [], 0
    greedy = []
    for pi, text in enumerate(PROMPTS):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        n = len(ids)
        with torch.no_grad():
            rl = ref(torch.tensor([ids], device="cuda")).logits[0].float().cpu().numpy()
        for p in sorted({0, 1, min(7, n - 1), n - 4 if n > 8 else n - 1}):
            if p >= n:
                continue
            kern_prefill(ids[:p], 0)
            for i in range(p, n):
                kl, nt = kern_decode(ids[i], i)
                r = rl[i]
                rel = float(np.linalg.norm(kl - r) / np.linalg.norm(r))
                ka, ra = int(np.argmax(kl)), int(np.argmax(r))
                top2 = np.sort(r)[-2:]
                margin = float(top2[1] - top2[0])
                agree = ka == ra and nt == ka
                if rel > 0.05 or (not agree and margin > 0.5):
                    bad += 1
                rows.append((pi, p, i, rel, agree, margin if not agree else None, nt == ka))
        # greedy continuation
        kern_prefill(ids[:n - 1], 0)
        _, nt = kern_decode(ids[n - 1], n - 1)
        out = [nt]
        for j in range(args.gen - 1):
            _, nt = kern_decode(out[-1], n + j)
            out.append(nt)
        with torch.no_grad():
            g = ref.generate(torch.tensor([ids], device="cuda"), max_new_tokens=args.gen,
                             do_sample=False, min_new_tokens=args.gen)[0, n:].tolist()
        k_same = next((j for j in range(len(g)) if g[j] != out[j]), len(g))
        note = ""
        if k_same < len(g):
            seq = ids + g[:k_same]
            with torch.no_grad():
                lr = ref(torch.tensor([seq], device="cuda")).logits[0, -1].float().cpu().numpy()
            t2 = np.sort(lr)[-2:]
            note = f"first divergence at +{k_same}: ref margin {float(t2[1] - t2[0]):.3f}"
        greedy.append((pi, n, k_same, len(g), note, tok.decode(out[:12])))

    print("\n== teacher-forced logits: kern decode vs transformers (per position) ==")
    print("prompt  prefill_p  pos   rel_err   argmax   ref_margin_if_disagree  next_token==argmax")
    for pi, p, i, rel, agree, margin, ntok in rows:
        print(f"{pi:6d}  {p:9d}  {i:4d}  {rel:8.4f}  {'ok' if agree else 'DIFF':>6}   "
              f"{'' if margin is None else f'{margin:.3f}':>22}  {ntok}")
    rels = np.array([r[3] for r in rows])
    agree = sum(r[4] for r in rows)
    print(f"\nsummary: {len(rows)} positions, rel err median {np.median(rels):.4f} max "
          f"{rels.max():.4f}; argmax agreement {agree}/{len(rows)}")
    print("\n== greedy ==")
    for pi, n, same, tot, note, txt in greedy:
        print(f"prompt {pi} ({n} tokens): {same}/{tot} identical {note}  kern: {txt!r}")
    (args.out / "device_check.json").write_text(json.dumps({
        "rows": rows, "greedy": greedy, "bad": bad}, default=str))
    print(f"\nbad positions: {bad}; total {time.monotonic() - t_start:.1f} s")
    rt.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
