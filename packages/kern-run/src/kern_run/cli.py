"""The ``kern-run`` command (Typer): parse, call one function, render.

    kern-run [--manifest M --kernels K --weights W --tokenizer T] [--prompt "…"] [--steps N]
             [--chunk 512] [--capacity C] [--eager] [--chat] [--gpu I]
             [--spec [dspark|ngram]] [--spec-k K] [--spec-check]
    kern-run bench [--case smollm2 --case qwen3] [--qwen3 DIR] [--no-baseline] [--profile] …

Every error is one clear message (naming the option, file or manifest entry) and a nonzero
exit: 2 for bad input, 1 for a failure while running (no GPU, a runtime error)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import sys

import typer
from kern_manifest import KernError, fail

from .errors import KernRunError, NoGpuError

app = typer.Typer(add_completion=False, no_args_is_help=False,
                  help="Run a Qwen3/Llama-family kern manifest: chunked prefill, graph "
                       "decode, greedy. Without model options: the bundled SmolLM2-135M.",
                  epilog="Exit status: 0 done; 1 the run failed (no usable GPU, a runtime "
                         "error, --spec-check found a divergence above 0.25 logit); 2 bad "
                         "input or usage (options, files, a manifest outside the contract).")


def _fail(err: Exception) -> None:
    # kern-run's own errors exit 2 (bad input) or 1 (no GPU); the runtime's exit 1.
    if isinstance(err, KernError):
        fail("kern-run", err)
    raise err


@app.callback(invoke_without_command=True)
def main_command(
    ctx: typer.Context,
    manifest: Annotated[Optional[Path], typer.Option(help="manifest.json (Qwen3/Llama caller contract)")] = None,
    kernels: Annotated[Optional[Path], typer.Option(help="kernels folder (default: kernels/ beside the manifest)")] = None,
    weights: Annotated[Optional[list[Path]], typer.Option(help="safetensors weights (repeat for several)")] = None,
    tokenizer: Annotated[Optional[Path], typer.Option(help="the model's GGUF, tokenizer.json, or a folder holding one")] = None,
    prompt: Annotated[str, typer.Option(help="prompt text")] = "The capital of France is",
    steps: Annotated[int, typer.Option(help="at most this many generated tokens")] = 64,
    chunk: Annotated[int, typer.Option(help="prefill chunk (clamped to the manifest's tokens.max)")] = 512,
    capacity: Annotated[Optional[int], typer.Option(help="KV capacity in tokens (≥ prompt + steps, ≤ the model's position limit; default: that limit if it fits in free GPU memory, else the most that fits; printed at start-up); not for a manifest whose KV state is fixed (`bytes_fixed`): its context is tokens.max")] = None,
    eager: Annotated[bool, typer.Option("--eager", help="launch step by step, no CUDA graphs")] = False,
    chat: Annotated[bool, typer.Option("--chat", help="wrap the prompt in the model's chat template")] = False,
    gpu: Annotated[int, typer.Option(help="CUDA device index")] = 0,
    summary: Annotated[bool, typer.Option("--summary", help="print the runtime's startup summary")] = False,
    spec: Annotated[Optional[str], typer.Option(metavar="[dspark|ngram]", help="speculative decoding (greedy, lossless) through the manifest's `verify`. Bare --spec: DSpark when the manifest has a `draft` program (its dspark.json and draft.safetensors beside the manifest), prompt lookup (ngram) otherwise; without model options bare --spec and --spec dspark run the bundled examples/smollm2-135m-dspark (the same SmolLM2 with its trained draft; if that is absent, bare --spec falls back to ngram on the plain example). --spec dspark|ngram forces the drafter")] = None,
    spec_k: Annotated[Optional[int], typer.Option(help="drafts per round at most (a round verifies k + 1 tokens; default: 7 for ngram, the draft's block for dspark)")] = None,
    spec_ngram: Annotated[str, typer.Option(help="n-gram lengths MIN:MAX that prompt lookup matches (longest first)")] = "2:4",
    spec_check: Annotated[bool, typer.Option("--spec-check", help="also run plain greedy in the same process and report the first divergence with the plain top-1/top-2 logit gap (exit 1 if above 0.25)")] = False,
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    from .runner import RunOptions, SpecCheckFailed, run
    try:
        opts = RunOptions(manifest=manifest, kernels=kernels, weights=list(weights or []),
                          tokenizer=tokenizer, prompt=prompt, steps=steps, chunk=chunk,
                          capacity=capacity, eager=eager, chat=chat, gpu=gpu, summary=summary,
                          spec=spec, spec_k=spec_k, spec_ngram=parse_ngram(spec_ngram),
                          spec_check=spec_check)
        run(opts)
    except SpecCheckFailed as err:
        sys.stderr.write(f"kern-run: --spec-check failed: {err}\n")
        raise typer.Exit(1)
    except Exception as err:
        _fail(err)


def parse_ngram(text: str) -> tuple[int, int]:
    """``"MIN:MAX"`` (or one number for both) -> (min, max); range checks are the loop's."""
    parts = text.split(":")
    try:
        if len(parts) == 1:
            n = int(parts[0])
            return n, n
        if len(parts) == 2:
            return int(parts[0]), int(parts[1])
    except ValueError:
        pass
    raise KernRunError(f"--spec-ngram {text!r}: give MIN:MAX, e.g. 2:4")


@app.command("bench")
def bench_command(
    case: Annotated[Optional[list[str]], typer.Option(help="smollm2 and/or qwen3 (default: both that are available)")] = None,
    qwen3: Annotated[Optional[Path], typer.Option(help="folder with the Qwen3-4B-shape manifest.json and kernels/")] = None,
    baseline: Annotated[bool, typer.Option("--baseline/--no-baseline", help="measure transformers + torch.compile in the same run")] = True,
    steps: Annotated[int, typer.Option(help="decode tokens per measured generation")] = 128,
    reps: Annotated[int, typer.Option(help="measured repetitions (medians are reported)")] = 5,
    prefill: Annotated[int, typer.Option(help="prefill prompt length for the throughput case")] = 2048,
    gpu: Annotated[int, typer.Option(help="CUDA device index")] = 0,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="also write the raw numbers as JSON")] = None,
    profile: Annotated[bool, typer.Option("--profile/--no-profile", help="also break one decode step's GPU time down by kernel (torch.profiler)")] = False,
    spec: Annotated[bool, typer.Option("--spec/--no-spec", help="also prompt-lookup speculation vs plain greedy on the shipped prompt sets (SmolLM2; transformers' prompt lookup as the peer unless --no-baseline) and verify/decode cost")] = False,
    spec_k: Annotated[int, typer.Option(help="drafts per speculation round")] = 7,
    spec_limit: Annotated[Optional[int], typer.Option(help="at most this many prompts per set")] = None,
    batch: Annotated[bool, typer.Option("--batch", help="instead: the engine (many sequences, paged KV) at each --concurrency against plain batch-1 generation of the same prompts (bundled default model; --steps tokens each)")] = False,
    prompts: Annotated[int, typer.Option(help="--batch: number of prompts")] = 64,
    prompt_len: Annotated[int, typer.Option(help="--batch: tokens per prompt")] = 128,
    prompt_source: Annotated[str, typer.Option(help="--batch: text (the spec prompt sets' texts) or ids (token ids)")] = "text",
    concurrency: Annotated[Optional[list[int]], typer.Option(help="--batch: requests in flight (repeat; default 1 4 16 32 64)")] = None,
    check: Annotated[bool, typer.Option("--check", help="--batch: compare every engine output with the plain run's tokens (first differing index)")] = False,
    plain_prompts: Annotated[Optional[int], typer.Option(help="--batch: run the plain baseline (and --check) on the first N prompts only (default: all)")] = None,
    per_concurrency: Annotated[Optional[int], typer.Option(help="--batch: concurrency c runs the first K x c prompts (default: all)")] = None,
    lever: Annotated[Optional[list[str]], typer.Option(help="CASE:LABEL=DIR (repeat): also measure the manifest in DIR (same weights) against the case's own, each with programmatic dependent launch off and on")] = None,
    ablate: Annotated[bool, typer.Option("--ablate/--no-ablate", help="also time the decode step without each class of kernels (GEMMs, attention, rope, captured): what each costs the step's span")] = False,
    random_weights: Annotated[bool, typer.Option("--random-weights", help="smollm2: seeded random weights of SmolLM2-135M's shape instead of the GGUF's (speed rows need no GGUF; not with --spec)")] = False,
) -> None:
    """The issue-7 benchmark: kern and the baseline, measured in one run, as a table."""
    from .runner import probe_gpu
    if batch:
        return _bench_batch(prompts, prompt_len, prompt_source, concurrency, check, steps, gpu,
                            json_out, qwen3, plain_prompts, per_concurrency)
    try:
        cases = list(case or [])
        bad = [c for c in cases if c not in ("smollm2", "qwen3")]
        if bad:
            raise KernRunError(f"--case `{bad[0]}` is not a case (smollm2, qwen3)")
        for name, v in (("--steps", steps), ("--reps", reps), ("--prefill", prefill),
                        ("--spec-k", spec_k), ("--spec-limit", spec_limit or 1)):
            if v < 1:
                raise KernRunError(f"{name} must be at least 1 (got {v})")
        if not cases:
            cases = ["smollm2"] + (["qwen3"] if qwen3 is not None else [])
        from .bench.levers import parse_levers
        levers = parse_levers(lever or [])
        if "qwen3" in cases and (qwen3 is None or not (qwen3 / "manifest.json").is_file()):
            raise KernRunError(f"--qwen3 `{qwen3}`: no manifest.json there (the Qwen3-4B-shape "
                               f"example written by kern-gen)")
        if random_weights and spec:
            raise KernRunError("--random-weights measures speed only: --spec's prompt sets "
                               "need the real model (drop one of them)")
        smollm2 = None
        if "smollm2" in cases:
            from .defaults import example_files, gguf_path
            example_files()
            if not random_weights:
                gguf_path()
        ok, why = probe_gpu()
        if not ok:
            raise NoGpuError(f"no usable GPU here ({why}); kern-run bench needs an NVIDIA GPU")
        if "smollm2" in cases and random_weights:
            from .bench.random_weights import random_smollm2
            smollm2 = random_smollm2()
        elif "smollm2" in cases:
            from .defaults import bundled_default
            smollm2 = bundled_default()
        from .bench import run_bench
        report = run_bench(cases=cases, smollm2=smollm2, qwen3_dir=qwen3, baseline=baseline,
                           steps=steps, reps=reps, prefill=prefill, gpu=gpu,
                           profile=profile, spec=spec, spec_k=spec_k, spec_limit=spec_limit,
                           levers=levers, ablate=ablate)
    except Exception as err:
        _fail(err)
        return
    _print_report(report, json_out)


def _print_report(report, json_out: Path | None) -> None:
    """The bench's table on stdout; its raw numbers as JSON to ``--json``."""
    import json
    print(report.table())
    if json_out is not None:
        json_out.write_text(json.dumps(report.data, indent=2, default=str))


def _bench_batch(prompts: int, prompt_len: int, source: str, concurrency: list[int] | None,
                 check: bool, steps: int, gpu: int, json_out: Path | None,
                 qwen3: Path | None = None, plain_prompts: int | None = None,
                 per_concurrency: int | None = None) -> None:
    from .bench.batch import CONCURRENCY, check_batch_options, run_batch
    from .runner import RunOptions, probe_gpu
    conc = list(concurrency or CONCURRENCY)
    try:
        check_batch_options(prompts, prompt_len, source, conc, steps=steps,
                            plain_prompts=plain_prompts, per_concurrency=per_concurrency,
                            qwen3=qwen3)
        ok, why = probe_gpu()
        if not ok:
            raise NoGpuError(f"no usable GPU here ({why}); kern-run bench needs an NVIDIA GPU")
        from .bench.batch import qwen3_options
        opts = qwen3_options(qwen3, gpu) if qwen3 is not None else RunOptions(gpu=gpu)
        report = run_batch(opts, prompts=prompts, prompt_len=prompt_len,
                           source=source, steps=steps, concurrency=conc, check=check,
                           plain_prompts=plain_prompts, per_concurrency=per_concurrency)
    except Exception as err:
        _fail(err)
        return
    _print_report(report, json_out)


def bare_spec(args: list[str]) -> list[str]:
    """``--spec`` takes an optional value: a bare ``--spec`` (last, or followed by another
    option) becomes ``--spec=auto`` (Typer options have no optional values). The command has
    no positional arguments, so a following word is always its value; ``bench`` has its own
    ``--spec`` flag and is left alone."""
    if args[:1] == ["bench"]:
        return list(args)
    out = []
    for i, a in enumerate(args):
        nxt = args[i + 1] if i + 1 < len(args) else None
        out.append("--spec=auto" if a == "--spec" and (nxt is None or nxt.startswith("-"))
                   else a)
    return out


def main() -> None:
    app(args=bare_spec(sys.argv[1:]), prog_name="kern-run")


if __name__ == "__main__":
    main()
