"""The ``kern-run`` command (Typer): parse, call one function, render.

    kern-run [--manifest M --kernels K --weights W --tokenizer T] [--prompt "…"] [--steps N]
             [--chunk 512] [--capacity 4096 | fixed by the manifest] [--eager] [--chat] [--gpu I]
    kern-run bench [--case smollm2 --case qwen3] [--qwen3 DIR] [--no-baseline] [--profile] …

Every error is one clear message (naming the option, file or manifest entry) and a nonzero
exit: 2 for bad input, 1 for a failure while running (no GPU, a runtime error)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from kern_manifest import KernError, fail

from .errors import KernRunError, NoGpuError

app = typer.Typer(add_completion=False, no_args_is_help=False,
                  help="Run a Qwen3/Llama-family kern manifest: chunked prefill, graph "
                       "decode, greedy. Without model options: the bundled SmolLM2-135M.")


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
    capacity: Annotated[Optional[int], typer.Option(help="KV capacity in tokens (≥ prompt + steps; default 4096); not for a manifest whose KV state is fixed (`bytes_fixed`): its context is tokens.max")] = None,
    eager: Annotated[bool, typer.Option("--eager", help="launch step by step, no CUDA graphs")] = False,
    chat: Annotated[bool, typer.Option("--chat", help="wrap the prompt in the model's chat template")] = False,
    gpu: Annotated[int, typer.Option(help="CUDA device index")] = 0,
    summary: Annotated[bool, typer.Option("--summary", help="print the runtime's startup summary")] = False,
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    from .runner import RunOptions, run
    opts = RunOptions(manifest=manifest, kernels=kernels, weights=list(weights or []),
                      tokenizer=tokenizer, prompt=prompt, steps=steps, chunk=chunk,
                      capacity=capacity, eager=eager, chat=chat, gpu=gpu, summary=summary)
    try:
        run(opts)
    except Exception as err:
        _fail(err)


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
) -> None:
    """The issue-7 benchmark: kern and the baseline, measured in one run, as a table."""
    import json

    from .runner import probe_gpu
    try:
        cases = list(case or [])
        bad = [c for c in cases if c not in ("smollm2", "qwen3")]
        if bad:
            raise KernRunError(f"--case `{bad[0]}` is not a case (smollm2, qwen3)")
        for name, v in (("--steps", steps), ("--reps", reps), ("--prefill", prefill)):
            if v < 1:
                raise KernRunError(f"{name} must be at least 1 (got {v})")
        if not cases:
            cases = ["smollm2"] + (["qwen3"] if qwen3 is not None else [])
        if "qwen3" in cases and (qwen3 is None or not (qwen3 / "manifest.json").is_file()):
            raise KernRunError(f"--qwen3 `{qwen3}`: no manifest.json there (the Qwen3-4B-shape "
                               f"example written by kern-gen)")
        smollm2 = None
        if "smollm2" in cases:
            from .defaults import example_files, gguf_path
            example_files()
            gguf_path()
        ok, why = probe_gpu()
        if not ok:
            raise NoGpuError(f"no usable GPU here ({why}); kern-run bench needs an NVIDIA GPU")
        if "smollm2" in cases:
            from .defaults import bundled_default
            smollm2 = bundled_default()
        from .bench import run_bench
        report = run_bench(cases=cases, smollm2=smollm2, qwen3_dir=qwen3, baseline=baseline,
                           steps=steps, reps=reps, prefill=prefill, gpu=gpu,
                           profile=profile)
    except Exception as err:
        _fail(err)
        return
    print(report.table())
    if json_out is not None:
        json_out.write_text(json.dumps(report.data, indent=2, default=str))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
