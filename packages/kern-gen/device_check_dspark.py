#!/usr/bin/env python3
"""GPU check of a `kern-gen dspark` manifest (issue 15): the draft's wiring against an
independent reference, then the loop's losslessness and timing, in one process.

    python3 packages/kern-gen/device_check_dspark.py --target llama|qwen3 [--draft FILE]
        [--gguf /tmp/g/SmolLM2-135M-Instruct.Q4_1.gguf] [--work DIR] [--out DIR]

1. The target: llama = SmolLM2-135M-Instruct from the GGUF (transformers, bf16, eager);
   qwen3 = `device_check_qwen3.build_model` (the Qwen3-4B-shaped random model). Its weights
   are exported with `kern_weights` (the draft's `draft.*` weights are provided by the draft
   file, not the source). The draft: `--draft` (a trained `draft.safetensors`, its
   `dspark.json` beside it), else random weights from `kern_train`'s `random` (seed 0).
2. **Wiring** (per prompt): kern `prefill` of all but the last prompt token, `carry` read
   back and compared with the reference projection `Σ_i h^(i) W_fc,iᵀ` of transformers'
   hidden states after the tap layers; `draft_precompute`; `decode_spec` of the last token
   (its carry row compared too); `draft_precompute` of that row; `draft` at the anchor (the
   decode's token). `draft.logits` (base + Markov, 7 rows) is compared with `kern_train`'s
   torch `Draft` on the same weights (context from transformers' taps, Markov prev = the
   anchor then kern's own draft tokens), by relative error, argmax agreement and the
   reference's top-1/top-2 margin where they disagree.
3. **Loop**: per prompt, plain greedy (`kern_run.generate`) and the DSpark loop
   (`kern_run.spec.dspark.dspark_generate`), same runtime: tokens compared; tokens per round,
   per-position acceptance, ms per token of both and the round's time split printed.
4. **Offline at the loop's anchors** (a trained `--draft` only): on the text each DSpark run
   produced, the torch `Draft` teacher-forced with transformers' taps at exactly the anchors
   the loop used (one per round, from the stats' `round_log`): what it accepts there against
   what the loop accepted. Equal: the draft is as good online as offline on this text (a gap to
   the held-out τ is then the text's); the reference higher: the serving path feeds the draft
   something else (docs/plan-issue-15.md). On the same text also at every position: the
   uniform-anchor τ (what the trainer's offline τ measures) and the greedy loop replayed from
   those accepted lengths (`kern_train…evaluate.loop_rounds`). `--bench-sets N` adds the
   first N prompts of each `kern-run bench --spec` set to stages 3-4.
Writes $OUT/device_check_dspark.json; exit 1 when a wiring error exceeds the bound or the loop
is not lossless at a position whose plain-decode margin exceeds 0.5 logits.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import device_check as dc  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = {"llama": REPO / "examples/smollm2-135m-dspark",
            "qwen3": REPO / "examples/qwen3-4b-dspark"}
TARGET_CONFIG = {"llama": REPO / "examples/smollm2-135m/config.json",
                 "qwen3": REPO / "examples/qwen3-4b/config.json"}
CARRY_BOUND = 0.05      # relative error of carry vs the reference projection
LOGIT_BOUND = 0.05      # relative error of the draft's logits vs the torch reference
TEXTS = ["The capital of France is", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci",
         "Question: Tom has 3 apples and buys 5 more. How many apples does he have?\nAnswer:"]


def rel(x: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(x - ref) / max(np.linalg.norm(ref), 1e-30))


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", choices=sorted(EXAMPLES), required=True)
    ap.add_argument("--example", type=Path, default=None,
                    help="a `kern-gen dspark` output directory (a lever) instead of the target's "
                         "bundled example")
    ap.add_argument("--draft", type=Path, help="trained draft.safetensors (dspark.json beside)")
    ap.add_argument("--gguf", type=Path, default=Path("/tmp/g/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/kern-dspark"))
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--steps", type=int, default=96)
    ap.add_argument("--prompt-tokens", type=int, default=48, help="qwen3: random prompt length")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--capacity", type=int, default=4096)
    ap.add_argument("--bench-sets", type=int, default=0, metavar="N",
                    help="llama + --draft: stages 3-4 also on the first N prompts of each "
                         "`kern-run bench --spec` set (chat-rendered)")
    ap.add_argument("--profile", action="store_true",
                    help="also each round program's GPU time by kernel (torch.profiler, "
                         "kern-run bench --profile's breakdown): decode, verify, draft")
    ap.add_argument("--no-pdl", dest="pdl", action="store_false",
                    help="load without programmatic dependent launch")
    ap.add_argument("--repeat", type=int, default=0, metavar="N",
                    help="also plain, unchained and chained N more times each: identical "
                         "tokens every time (a determinism check)")
    ap.add_argument("--tail-ab", action="store_true",
                    help="also the unchained loop with its plain tail by stream operations "
                         "(mailboxes=False): the same tokens and rounds as through the "
                         "mailboxes (a --capacity just above prompt + steps makes the tail "
                         "several steps long)")
    ap.add_argument("--chain", action="store_true",
                    help="also the chained rounds (verify queued behind the draft): same "
                         "tokens as the unchained loop, and their ms/token")
    return ap.parse_args(argv)


def load_target(args, log):
    import torch
    if args.target == "llama":
        from transformers import AutoModelForCausalLM, AutoTokenizer
        gdir, gname = str(args.gguf.parent), args.gguf.name
        tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
        model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.bfloat16,
                                                     attn_implementation="eager").cuda().eval()
        prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
        return model, prompts, lambda: __import__("kern_weights").open_source(gguf=args.gguf)
    import device_check_qwen3 as q
    model = q.build_model(args.seed)
    rng = np.random.default_rng(args.seed)
    V = model.config.vocab_size
    prompts = [rng.integers(0, V, args.prompt_tokens).tolist() for _ in range(3)]
    return model, prompts, lambda: q.MemorySource(model)


def draft_files(args, log) -> tuple[Path, dict]:
    """(draft.safetensors, its dspark.json as a dict): the given trained draft, else random
    weights written under --work by kern_train's `random` (seed 0), the example's structure."""
    if args.draft is not None:
        return args.draft, json.loads((args.draft.parent / "dspark.json").read_text())
    from kern_train.dspark.config import read_geometry
    from kern_train.dspark.export import export
    from kern_train.dspark.random_init import random_arrays, random_config
    d = args.work / "random-draft"
    spec = json.loads(((args.example or EXAMPLES[args.target]) / "dspark.json").read_text())
    g = read_geometry(TARGET_CONFIG[args.target])
    cfg = random_config(g, spec["target"], layers=spec["layers"],
                        markov_rank=spec["markov_rank"], mask_token_id=spec["mask_token_id"],
                        seed=0)
    export(d, g, cfg, random_arrays(g, cfg))
    log(f"random draft written to {d}")
    return d / "draft.safetensors", json.loads((d / "dspark.json").read_text())


def reference_draft(args, model, draft: Path):
    """kern_train's torch Draft with the weights of ``draft`` (fp32, cuda)."""
    from kern_train.dspark.config import read_config, read_geometry
    from kern_train.dspark.pipeline import load_draft
    from kern_train.dspark.target import Target
    t = Target(model=model, tokenizer=None, name="reference",
               geometry=read_geometry(TARGET_CONFIG[args.target]))
    return load_draft(t, read_config(draft.parent / "dspark.json"), draft).cuda().float().eval()


def taps_of(model, ids: list[int], layers: list[int]):
    import torch
    with torch.no_grad():
        out = model.model(input_ids=torch.tensor([ids], device="cuda"),
                          output_hidden_states=True, use_cache=False)
    return torch.cat([out.hidden_states[i + 1] for i in layers], dim=-1).float()


def wiring(rt, ref, model, spec: dict, ids: list[int], fc, log) -> dict:
    """Stage 2 for one prompt; returns its numbers."""
    import torch
    from kern_runtime import from_bf16
    n, B = len(ids), spec["block"]
    taps = taps_of(model, ids, spec["tap_layers"])                 # [1, n, 5d]
    want = (taps[0] @ fc.T).cpu().numpy()                          # [n, d]
    dc.write_call(rt, ids[:n - 1], 0)
    rt.run("prefill", {"tokens": n - 1})
    carry = from_bf16(rt.read("carry", {"tokens": n - 1})).astype(np.float32)
    rt.run("draft_precompute", {"tokens": n - 1})
    dc.write_call(rt, ids[n - 1:], n - 1)
    rt.run("decode_spec", {"tokens": 1})
    a = int(rt.read("next_token", {"tokens": 1}).reshape(-1)[0])
    carry1 = from_bf16(rt.read("carry", {"tokens": 1})).astype(np.float32)
    rt.run("draft_precompute", {"tokens": 1})
    block = [a] + [spec["mask_token_id"]] * (B - 1)
    dc.write_call(rt, block, n)
    rt.write("kv_lens", np.full(B, n + B, dtype=np.int32))
    rt.run("draft", {"tokens": B})
    kl = from_bf16(rt.read("draft.logits")).astype(np.float32).reshape(B, -1)
    kt = rt.read("draft_tokens").reshape(-1).astype(np.int64)
    with torch.no_grad():
        c = ref.context(taps)
        h = ref.rows(c, torch.tensor([[a]], device="cuda"), torch.tensor([[n]], device="cuda"))
        prev = torch.tensor([[[a] + kt[:B - 1].tolist()]], device="cuda")
        rl = (ref.base_logits(h) + ref.markov(prev))[0, 0].cpu().numpy()   # [B, V]
    rows = []
    for t in range(B):
        top = np.sort(rl[t])[-2:]
        rows.append({"row": t, "rel_err": rel(kl[t], rl[t]), "kern": int(kt[t]),
                     "ref": int(rl[t].argmax()), "ref_margin": float(top[1] - top[0])})
    return {"n": n, "carry_rel": rel(carry, want[:n - 1]), "carry1_rel": rel(carry1[0],
            want[n - 1]), "rows": rows}


def offline_at_anchors(ref_target, ref, ids: list[int], sp) -> dict:
    """Stage 4 for one DSpark run ``sp`` of prompt ``ids``: the reference draft at the loop's
    anchors, and at every position of the same text (its uniform τ, as the trainer's offline τ
    samples anchors, and the greedy loop replayed from those accepted lengths)."""
    from kern_train.dspark.evaluate import accepted_at, loop_rounds
    seq = list(ids) + list(sp.tokens)
    every = list(range(len(ids), len(seq)))      # the loop's anchors are among these
    acc = {p: a for p, a in zip(every, accepted_at(ref_target, ref, seq, every)) if a is not None}
    want = [acc.get(p) for p in sp.spec.anchors(len(ids))]
    pairs = [(t - 1, w) for t, w in zip(sp.spec.round_log, want) if w is not None]
    n = max(len(pairs), 1)
    replay = loop_rounds(acc, len(ids))
    return {"rounds": len(pairs),
            "online_tau": 1 + sum(o for o, _ in pairs) / n,
            "reference_tau": 1 + sum(w for _, w in pairs) / n,
            "reference_more": sum(w > o for o, w in pairs),
            "reference_less": sum(w < o for o, w in pairs),
            "uniform_tau": 1 + sum(acc.values()) / max(len(acc), 1), "positions": len(acc),
            "replay_tau": sum(replay) / max(len(replay), 1), "replay_rounds": len(replay)}


def repeats(rt, ids, args, tmax, ds, plain, sp) -> dict[str, bool]:
    """Run plain greedy, the unchained and the chained DSpark loop ``--repeat`` more times
    each: does every run give the first run's tokens (the kernels are deterministic: a
    difference is a race)?"""
    from kern_run.generate import generate
    from kern_run.spec.dspark import dspark_generate
    common = dict(steps=args.steps, chunk=tmax, max_tokens=tmax, capacity=args.capacity)
    first = {"plain": plain.tokens, "unchained": sp.tokens}
    out = {}
    for name in ("plain", "unchained", "chained"):
        runs = []
        for _ in range(args.repeat):
            r = (generate(rt, ids, **common) if name == "plain" else
                 dspark_generate(rt, ids, draft=ds, chain=name == "chained", **common))
            runs.append(r.tokens)
        ref = first.get(name, runs[0])
        out[name] = all(t == ref for t in runs)
    return out


def profile_programs(rt, block: int, log, chunk: int, capacity: int) -> None:
    """decode, verify (8 rows), draft and draft_precompute (1 row, a round's block + 1 and a
    prompt chunk of ``chunk`` rows at positions 0 …, written first), each replayed
    back-to-back under torch.profiler on the state the last loop left (every input valid), by
    kernel (kern_run.bench.profile)."""
    from kern_run.bench.profile import STEPS, breakdown, record_program
    from kern_run.inputs import Inputs, table_pages_of
    for program, tokens in (("decode", 1), ("verify", 8), ("draft", block),
                            ("draft_precompute", 1), ("draft_precompute", block + 1),
                            ("draft_precompute", chunk), ("draft_precompute_prefill", chunk),
                            ("draft_precompute_prefill", block + 1)):
        if tokens == chunk:                   # a prompt chunk's rows at 0 … chunk−1
            Inputs(chunk, table_pages=table_pages_of(rt), capacity=capacity).write(
                rt, [0] * tokens, 0)
        b = breakdown(record_program(rt, program, {"tokens": tokens}, gpu=0), STEPS)
        log(f"profile {program} (tokens {tokens}):\n  " + "\n  ".join(b.lines()))


def bench_prompts(args, limit: int) -> list[tuple[str, list[int]]]:
    """The first ``limit`` prompts of each `kern-run bench --spec` set, chat-rendered and
    tokenized as the bench does (kern-run's GGUF tokenizer)."""
    from kern_run.spec import load_prompt_sets
    from kern_run.tokenizer import load_tokenizer
    tok = load_tokenizer(args.gguf)
    return [(name, tok.encode(tok.chat_prompt(p.text)))
            for name, ps in load_prompt_sets().items() for p in ps[:limit]]


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f} s] {msg}", flush=True)

    import torch
    from kern_runtime import Runtime
    from kern_weights import export_files, read_manifest
    from kern_run.generate import generate
    from kern_run.spec.dspark import DraftSpec, dspark_generate

    torch.backends.cuda.matmul.allow_tf32 = False
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    ex = args.example or EXAMPLES[args.target]
    man = read_manifest(ex / "manifest.json")
    model, prompts, source = load_target(args, log)
    log(f"target loaded ({args.target})")
    draft, spec = draft_files(args, log)
    weights = args.work / "kern-target.safetensors"
    s = export_files(man, source(), weights, ex / "export-plan.json", provided=[draft])
    log(f"export: {s.tensors} tensors, {s.bytes / 2**20:.0f} MiB")
    ref = reference_draft(args, model, draft)
    fc = ref.fc.weight.detach().float()                          # [d, 5d]
    rt = Runtime.load(ex / "manifest.json", ex / "kernels", weights=[str(weights), str(draft)],
                      capacity=args.capacity, pdl=args.pdl)
    log("kern loaded")
    report = {"target": args.target, "draft": str(draft), "trained": spec.get("trained"),
              "wiring": [], "loop": []}
    bad = 0
    for ids in prompts:
        w = wiring(rt, ref, model, spec, ids, fc, log)
        report["wiring"].append(w)
        errs = [r["rel_err"] for r in w["rows"]]
        flips = [r for r in w["rows"] if r["kern"] != r["ref"]]
        log(f"wiring n={w['n']}: carry rel {w['carry_rel']:.4f} / {w['carry1_rel']:.4f}, draft "
            f"logits rel max {max(errs):.4f}, argmax flips {len(flips)} at ref margins "
            f"{[round(r['ref_margin'], 3) for r in flips]}")
        bad += (w["carry_rel"] > CARRY_BOUND or w["carry1_rel"] > CARRY_BOUND
                or max(errs) > LOGIT_BOUND)
    at_anchors = args.draft is not None           # stage 4 keeps the target for its taps
    if at_anchors:
        from kern_train.dspark.config import read_geometry
        from kern_train.dspark.target import Target
        ref_target = Target(model=model, tokenizer=None, name="reference",
                            geometry=read_geometry(TARGET_CONFIG[args.target]))
    else:
        del model
        torch.cuda.empty_cache()
    tmax = man.symbols["tokens"].max
    ds = DraftSpec(block=spec["block"], mask_token_id=spec["mask_token_id"])
    runs = [("texts", ids) for ids in prompts]
    if at_anchors and args.target == "llama" and args.bench_sets:
        runs += bench_prompts(args, args.bench_sets)
    for set_name, ids in runs:
        plain = generate(rt, ids, steps=args.steps, chunk=tmax, max_tokens=tmax,
                         capacity=args.capacity)
        sp = dspark_generate(rt, ids, steps=args.steps, chunk=tmax, max_tokens=tmax, draft=ds,
                             capacity=args.capacity, chain=False)
        same = next((i for i, (x, y) in enumerate(zip(plain.tokens, sp.tokens)) if x != y),
                    min(len(plain.tokens), len(sp.tokens)))
        st = sp.spec
        chained = {}
        if args.tail_ab:
            sb = dspark_generate(rt, ids, steps=args.steps, chunk=tmax, max_tokens=tmax,
                                 draft=ds, capacity=args.capacity, chain=False,
                                 mailboxes=False)
            chained["tail_same"] = sb.tokens == sp.tokens and sb.spec.round_log == st.round_log
            bad += not chained["tail_same"]
            log(f"tail: {st.decode_steps} plain steps ({st.tail_reason}) through the mailboxes "
                f"vs by stream operations: tokens and rounds "
                f"{'identical' if chained['tail_same'] else 'DIFFER'}")
        if args.chain:
            sc = dspark_generate(rt, ids, steps=args.steps, chunk=tmax, max_tokens=tmax,
                                 draft=ds, capacity=args.capacity, chain=True)
            chained = {"chained_same": sc.tokens == sp.tokens,
                       "chained_ms": 1e3 * sc.decode_s / max(sc.decode_tokens, 1)}
            sa = dspark_generate(rt, ids, steps=args.steps, chunk=tmax, max_tokens=tmax,
                                 draft=ds, capacity=args.capacity, chain=True, ahead=False)
            chained.update(after_same=sa.tokens == sp.tokens and
                           sa.spec.round_log == sc.spec.round_log,
                           after_ms=1e3 * sa.decode_s / max(sa.decode_tokens, 1))
            log(f"chained, precompute after the wait: tokens and rounds "
                f"{'identical to' if chained['after_same'] else 'DIFFER from'} the ahead "
                f"loop's; {chained['after_ms']:.3f} ms/token")
            from kern_runtime.timing import timing_event
            for key, ahead in (("chained_timed", True), ("after_timed", False)):
                st_t = dspark_generate(rt, ids, steps=args.steps, chunk=tmax, max_tokens=tmax,
                                       draft=ds, capacity=args.capacity, chain=True,
                                       ahead=ahead, gpu_timer=lambda: timing_event(rt)).spec
                chained[key] = st_t.lines()
                log(f"{key} with GPU events: " + " | ".join(st_t.lines()[2:]))
            spp = dspark_generate(rt, ids, steps=args.steps, chunk=tmax, max_tokens=tmax,
                                  draft=ds, capacity=args.capacity, chain=True, pipeline=True)
            pst = spp.spec
            chained.update(pipelined_same=spp.tokens == sc.tokens and
                           pst.round_log == sc.spec.round_log and pst.pipelined,
                           pipelined_ms=1e3 * spp.decode_s / max(spp.decode_tokens, 1),
                           pipelined_round_ms=pst.ms_per_round,
                           chained_round_ms=sc.spec.ms_per_round,
                           pipelined_queued=pst.queued_ahead, pipelined_lines=pst.lines())
            plain_ms = 1e3 * plain.decode_s / max(plain.decode_tokens, 1)
            for how in ("kernel", "off"):       # the default "memcpy" is the row above
                spg = dspark_generate(rt, ids, steps=args.steps, chunk=tmax, max_tokens=tmax,
                                      draft=ds, capacity=args.capacity, chain=True,
                                      pipeline=True, round_graph=how)
                chained[f"round_graph_{how}_same"] = spg.tokens == spp.tokens
                chained[f"round_graph_{how}_round_ms"] = spg.spec.ms_per_round
                log(f"pipelined, round_graph={how}: tokens "
                    f"{'identical to' if spg.tokens == spp.tokens else 'DIFFER from'} the "
                    f"default's; round {spg.spec.ms_per_round:.3f} ms = "
                    f"{spg.spec.ms_per_round / plain_ms:.3f} plain steps")
            same_p = "identical to" if chained["pipelined_same"] else "DIFFER from"
            log(f"pipelined: tokens and rounds {same_p} the chained loop's; "
                f"{chained['pipelined_ms']:.3f} ms/token; round {pst.ms_per_round:.3f} ms = {pst.ms_per_round / plain_ms:.3f} plain steps "
                f"(chained {sc.spec.ms_per_round:.3f} ms = "
                f"{sc.spec.ms_per_round / plain_ms:.3f}); {pst.queued_ahead} of {pst.rounds} "
                f"rounds queued ahead | " + " | ".join(pst.lines()[2:]))
            bad += not (chained["chained_same"] and chained["after_same"]
                        and chained["pipelined_same"] and chained["round_graph_kernel_same"]
                        and chained["round_graph_off_same"])
            log(f"chained: tokens {'identical to' if chained['chained_same'] else 'DIFFER from'}"
                f" the unchained loop's; {chained['chained_ms']:.3f} ms/token")
        if args.repeat:
            chained["repeats_same"] = same_runs = repeats(rt, ids, args, tmax, ds, plain, sp)
            bad += not all(same_runs.values())
            log(f"repeats x{args.repeat}: identical tokens {same_runs}")
        row = {**chained, "set": set_name, "n": len(ids), "identical": same, "of": len(plain.tokens),
               "plain_ms": 1e3 * plain.decode_s / max(plain.decode_tokens, 1),
               "spec_ms": 1e3 * sp.decode_s / max(sp.decode_tokens, 1),
               "stats": st.render() if hasattr(st, "render") else str(st)}
        if same < len(plain.tokens):
            seq = ids + plain.tokens[:same]
            dc.kern_prefill(rt, seq[:-1], 0, tmax, tmax)
            lg, _ = dc.kern_decode(rt, seq[-1], len(seq) - 1)
            row["plain_margin_at_divergence"] = dc.top_margin(lg)
            bad += row["plain_margin_at_divergence"] > 0.5
        if at_anchors:
            row["at_anchors"] = a = offline_at_anchors(ref_target, ref, ids, sp)
            log(f"{set_name}: at the loop's anchors ({a['rounds']} rounds): online τ "
                f"{a['online_tau']:.2f}, reference τ {a['reference_tau']:.2f} (reference more "
                f"in {a['reference_more']}, less in {a['reference_less']}); every position of "
                f"the text: uniform τ {a['uniform_tau']:.2f} ({a['positions']} anchors), the "
                f"loop replayed τ {a['replay_tau']:.2f} ({a['replay_rounds']} rounds)")
        report["loop"].append(row)
        log(f"loop n={len(ids)}: {same}/{len(plain.tokens)} identical; plain "
            f"{row['plain_ms']:.3f} ms/token, dspark {row['spec_ms']:.3f} ms/token "
            f"({row['plain_ms'] / max(row['spec_ms'], 1e-9):.2f}x)\n{row['stats']}")
    if args.profile:
        profile_programs(rt, spec["block"], log, min(tmax, args.capacity), args.capacity)
    rt.close()
    (args.out / "device_check_dspark.json").write_text(json.dumps(report, indent=1))
    log(f"done: {'FAIL' if bad else 'ok'} ({bad} bad)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
