#!/usr/bin/env python3
"""Run a Hugging Face causal LM under torch.compile at batch 1 - the workload captured by
libkerncapture.so - and write the provider sidecar.

The script knows nothing about the capture library: it is an ordinary PyTorch program
(run it with or without CUDA_INJECTION64_PATH; that is the slowdown comparison).

Workload: for each prompt length, one prefill of that many tokens and --decode greedy
decode steps, all through one compiled forward (Inductor, default mode: no CUDA graphs,
so every kernel launch executes and is seen by CUPTI; Inductor's programmatic dependent
launch is on unless --no-pdl: its Triton kernels wait on the grid dependency and launch
their dependents early, the code kern replays with PDL).  A static KV cache keeps cache
pointers fixed across requests.  --cache-layout token-major (the default) stores it
`[1, L, kv_heads, D]` with L = the model's max_position_embeddings and an explicit
per-token write index (token_major_cache.py says why); head-major is transformers'
StaticCache `[1, kv_heads, L, D]` (L = --max-cache, 1024 by default), the layout of the
captures before issue 13.

Sidecar (JSON, --sidecar): every weight and KV-cache tensor (name, data_ptr, bytes, dtype,
shape) and every request's token counts, with CLOCK_MONOTONIC start/end of each forward.
The sidecar is the provider's ground truth for generators' assertions and for evaluating
the miner; nothing in it may flow into the miner.

Models:
  qwen3-4b-random  Qwen3ForCausalLM, Qwen3-4B shape, seeded random bf16 weights
  smollm2          SmolLM2-135M-Instruct from a GGUF file (--gguf; needs the gguf package)
  qwen3-tiny       2 layers of the Qwen3 shape (for quick checks)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

QWEN3_4B = dict(
    hidden_size=2560,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=9728,
    vocab_size=151936,
    tie_word_embeddings=True,
    max_position_embeddings=40960,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    hidden_act="silu",
)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def log(msg: str) -> None:
    print(f"[hf_capture {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def build_model(args: argparse.Namespace):
    """Returns (model, tokenizer or None) on cuda in bf16."""
    import transformers

    if args.model in ("qwen3-4b-random", "qwen3-tiny"):
        cfg = dict(QWEN3_4B)
        if args.model == "qwen3-tiny":
            cfg["num_hidden_layers"] = 2
        config = transformers.Qwen3Config(**cfg)
        config._attn_implementation = args.attn
        torch.manual_seed(args.seed)
        prev = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with torch.device(args.device):
                model = transformers.Qwen3ForCausalLM(config)
        finally:
            torch.set_default_dtype(prev)
        # Re-draw every weight from the seed on the device so the values do not depend on
        # transformers' init scheme (norm weights around 1, everything else N(0, 0.02)).
        gen = torch.Generator(device=args.device).manual_seed(args.seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen, device=p.device, dtype=torch.float32))
                else:
                    p.copy_(0.02 * torch.randn(p.shape, generator=gen, device=p.device, dtype=torch.float32))
        return model.eval(), None
    if args.model == "smollm2":
        gguf = Path(args.gguf)
        kw = dict(gguf_file=gguf.name)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), dtype=torch.bfloat16, attn_implementation=args.attn, **kw
        )
        tok = None
        try:
            tok = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), **kw)
        except Exception as e:  # the tokenizer only makes prompts look like text
            log(f"tokenizer not loaded ({type(e).__name__}: {e}); random token ids")
        return model.to(args.device).eval(), tok
    raise SystemExit(f"unknown model {args.model}")


def make_cache(model, args: argparse.Namespace):
    """A static cache (fixed pointers) if this transformers version builds one, else dynamic."""
    import transformers

    if args.cache == "static" and args.cache_layout == "token-major":
        from token_major_cache import TokenMajorCache

        return TokenMajorCache(model.config.num_hidden_layers, args.max_cache, args.device), "static"
    if args.cache == "static":
        for kwargs in (
            dict(config=model.config, max_cache_len=args.max_cache),
            dict(config=model.config, max_batch_size=1, max_cache_len=args.max_cache, device=args.device,
                 dtype=torch.bfloat16),
        ):
            try:
                return transformers.StaticCache(**kwargs), "static"
            except TypeError:
                continue
        log("StaticCache could not be built with known signatures; using DynamicCache")
    return transformers.DynamicCache(), "dynamic"


def cache_tensors(cache) -> list[tuple[str, torch.Tensor]]:
    """Every KV tensor of a transformers cache, named `layers.<i>.keys|values`."""
    if hasattr(cache, "tensors"):
        return cache.tensors()
    out: list[tuple[str, torch.Tensor]] = []
    layers = getattr(cache, "layers", None)
    if layers is not None:
        for i, layer in enumerate(layers):
            for attr in ("keys", "values"):
                t = getattr(layer, attr, None)
                if isinstance(t, torch.Tensor):
                    out.append((f"layers.{i}.{attr}", t))
    for attr in ("key_cache", "value_cache"):
        ts = getattr(cache, attr, None)
        if isinstance(ts, (list, tuple)):
            for i, t in enumerate(ts):
                if isinstance(t, torch.Tensor):
                    out.append((f"{attr}.{i}", t))
    return out


def describe(name: str, t: torch.Tensor) -> dict:
    return {
        "name": name,
        "data_ptr": int(t.data_ptr()),
        "bytes": int(t.numel() * t.element_size()),
        "dtype": str(t.dtype).removeprefix("torch."),
        "shape": list(t.shape),
        "stride": list(t.stride()),
    }


def prompt_ids(n: int, tok, vocab: int, seed: int) -> list[int]:
    """Deterministic per length, so a warmup and its measured request run the same tokens."""
    gen = torch.Generator().manual_seed(seed * 100003 + n)
    if tok is not None:
        text = ("The capital of France is Paris. Rivers flow to the sea, and the sea gives back rain. " * 64)
        ids = tok(text)["input_ids"]
        if len(ids) >= n:
            return list(ids[:n])
    return torch.randint(0, vocab, (n,), generator=gen).tolist()


def step_inputs(cache, pos: int, tokens: int, args: argparse.Namespace) -> dict:
    """Model keyword arguments of one forward at positions pos .. pos + tokens - 1: the
    token-major cache takes its write slots first and the model gets explicit position_ids;
    transformers' StaticCache derives both from its own counter (cache_position is ignored
    by transformers 5 and kept for older versions)."""
    if hasattr(cache, "feed"):
        return {"position_ids": cache.feed(pos, tokens, args.device)}
    return {"cache_position": torch.arange(pos, pos + tokens, device=args.device)}


def run(args: argparse.Namespace) -> dict:
    t_start = time.monotonic_ns()
    model, tok = build_model(args)
    sync(args.device)
    t_loaded = time.monotonic_ns()
    log(f"model {args.model} loaded in {(t_loaded - t_start) / 1e9:.1f} s "
        f"({sum(p.numel() for p in model.parameters()) / 1e6:.0f} M params, attn={args.attn})")

    if args.max_cache is None:
        args.max_cache = (int(model.config.max_position_embeddings) if args.cache_layout == "token-major"
                          else 1024)
    cache, cache_kind = make_cache(model, args)
    if cache_kind == "static":
        # One eager token first: the static cache allocates its tensors lazily on first use,
        # and compiling against an uninitialised cache costs an extra recompile (~30 s).
        with torch.no_grad():
            model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=args.device), past_key_values=cache,
                  use_cache=True, logits_to_keep=1, **step_inputs(cache, 0, 1, args))
        sync(args.device)
    forward = model.forward
    if args.compile:
        # Inductor's Triton kernels then start with a grid-dependency wait (SASS ACQBULK) and
        # signal their dependents (PREEXIT), and are launched with programmatic stream
        # serialization; kern-gen marks a mined step `pdl` only where its cubin has the wait.
        import torch._inductor.config as inductor_config
        if not hasattr(inductor_config.triton, "enable_pdl"):
            raise SystemExit(f"torch {torch.__version__}: Inductor has no triton.enable_pdl; "
                             f"capture with --no-pdl or a newer torch")
        inductor_config.triton.enable_pdl = args.pdl
        forward = torch.compile(model.forward, dynamic=args.dynamic, fullgraph=False)
    vocab = model.config.vocab_size
    requests = []
    pos = 0  # every request starts at position 0 of a reset cache
    warmups = []
    schedule = [(n, True) for n in args.prompts for _ in range(args.warmup)] if args.warmup_first else []
    for n in args.prompts:
        schedule += [(n, True)] * (0 if args.warmup_first else args.warmup) + [(n, False)]
    for n, is_warmup in schedule:
        if n + args.decode > args.max_cache:
            log(f"prompt {n} + {args.decode} exceeds the cache ({args.max_cache}); skipped")
            continue
        if hasattr(cache, "reset"):
            cache.reset()
        elif cache_kind == "dynamic":
            cache, _ = make_cache(model, args)
        ids = prompt_ids(n, tok, vocab, args.seed)
        req = {"prompt_tokens": n, "decode_steps": args.decode, "forwards": []}
        inp = torch.tensor([ids], device=args.device)
        pos = 0
        generated = []
        for step in range(args.decode + 1):
            t_in = inp.shape[1]
            extra = step_inputs(cache, pos, t_in, args)
            t0 = time.monotonic_ns()
            with torch.no_grad():
                out = forward(input_ids=inp, past_key_values=cache, use_cache=True, logits_to_keep=1, **extra)
            nxt = int(out.logits[0, -1].argmax())
            sync(args.device)
            t1 = time.monotonic_ns()
            fwd = {"kind": "prefill" if step == 0 else "decode", "tokens": t_in, "position": pos,
                   "t0_ns": t0, "t1_ns": t1, "input_ids_ptr": int(inp.data_ptr())}
            if "position_ids" in extra:     # the token-major layout's two per-token index inputs
                fwd["position_ids_ptr"] = int(extra["position_ids"].data_ptr())
                fwd["slots_ptr"] = int(cache.slots.data_ptr())
            req["forwards"].append(fwd)
            generated.append(nxt)
            pos += t_in
            inp = torch.tensor([[nxt]], device=args.device)
        req["generated"] = generated
        if tok is not None:
            req["generated_text"] = tok.decode(generated)
        (warmups if is_warmup else requests).append(req)
        f = req["forwards"]
        log(f"{'warmup' if is_warmup else 'prompt'} {n:4d}: prefill {(f[0]['t1_ns'] - f[0]['t0_ns']) / 1e6:9.1f} ms, "
            f"decode {[round((x['t1_ns'] - x['t0_ns']) / 1e6, 2) for x in f[1:]]} ms -> {generated}")
    t_end = time.monotonic_ns()

    weights = [describe(n, p) for n, p in model.named_parameters(remove_duplicate=False)]
    weights += [describe(n, b) for n, b in model.named_buffers(remove_duplicate=False)]
    return {
        "format": "kern-provider-sidecar",
        "version": 1,
        "note": "provider ground truth for generators and evaluation; must not flow into the miner",
        "model": args.model,
        "config": model.config.to_dict() if hasattr(model.config, "to_dict") else {},
        "attn_implementation": args.attn,
        "cache": {"kind": cache_kind, "layout": args.cache_layout if cache_kind == "static" else "dynamic",
                  "max_len": args.max_cache, "tensors": [describe(n, t) for n, t in cache_tensors(cache)]},
        "compile": {"enabled": args.compile, "dynamic": args.dynamic, "mode": "default", "cudagraphs": False,
                    "pdl": args.pdl},
        "torch": torch.__version__,
        "pid": os.getpid(),
        "clock": "CLOCK_MONOTONIC",
        "t_start_ns": t_start,
        "t_loaded_ns": t_loaded,
        "t_end_ns": t_end,
        "requests": requests,
        "warmup_requests": warmups,
        "weights": weights,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, choices=["qwen3-4b-random", "qwen3-tiny", "smollm2"])
    ap.add_argument("--gguf", help="path of SmolLM2-135M-Instruct.Q4_1.gguf (smollm2)")
    ap.add_argument("--prompts", default="1,7,34,85,175,600", help="comma-separated prompt lengths")
    ap.add_argument("--decode", type=int, default=3, help="decode steps per prompt")
    ap.add_argument("--attn", default="sdpa", help="attn_implementation (sdpa, flex_attention, eager)")
    ap.add_argument("--cache", default="static", choices=["static", "dynamic"])
    ap.add_argument("--cache-layout", default="token-major", choices=["token-major", "head-major"],
                    help="static cache storage: token-major [1, L, kv_heads, D] (capacity-free writers) or "
                         "transformers' StaticCache head-major [1, kv_heads, L, D]")
    ap.add_argument("--max-cache", type=int, default=None,
                    help="static cache length L (default: the model's max_position_embeddings for "
                         "token-major, 1024 for head-major)")
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    ap.add_argument("--no-pdl", dest="pdl", action="store_false",
                    help="compile without Inductor's programmatic dependent launch "
                         "(torch._inductor.config.triton.enable_pdl; on by default)")
    ap.add_argument("--dynamic", default="auto", choices=["auto", "true", "false"],
                    help="torch.compile dynamic= (auto: None, PyTorch decides)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="unmeasured runs of each prompt before its measured request (compilation and "
                         "autotuning happen there; they appear in the capture, not in `requests`)")
    ap.add_argument("--warmup-first", action="store_true",
                    help="run all warmups before all measured requests (default: interleaved per prompt)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sidecar", help="write the provider sidecar JSON here")
    ap.add_argument("--fallback-attn", default="sdpa",
                    help="if the run fails with --attn, retry once in a fresh process state with this")
    args = ap.parse_args()
    args.prompts = [int(x) for x in args.prompts.split(",") if x]
    args.dynamic = {"auto": None, "true": True, "false": False}[args.dynamic]
    if args.model == "smollm2" and not (args.gguf and Path(args.gguf).is_file()):
        log(f"SKIP smollm2: GGUF file not found ({args.gguf})")
        return 3
    try:
        result = run(args)
    except Exception:
        traceback.print_exc()
        if not args.fallback_attn or args.fallback_attn == args.attn:
            return 1
        log(f"run with attn={args.attn} failed; retrying with attn={args.fallback_attn}")
        import torch._dynamo

        torch._dynamo.reset()
        failed = args.attn
        args.attn = args.fallback_attn
        result = run(args)
        result["attn_failed_first"] = failed
    if args.sidecar:
        Path(args.sidecar).write_text(json.dumps(result, indent=1))
    total = (result["t_end_ns"] - result["t_start_ns"]) / 1e9
    log(f"done: {len(result['requests'])} requests, {total:.1f} s in-process")
    print(json.dumps({"hf_capture_result": {"model": args.model, "attn": result["attn_implementation"],
                                            "cache": result["cache"]["kind"], "seconds": round(total, 2)}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
