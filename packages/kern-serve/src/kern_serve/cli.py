"""The ``kern-serve`` command (Typer): the server, and ``kern-serve bench``.

    kern-serve [--host 127.0.0.1 --port 8000] [--served-model-name N] [--api-key K]
               [--max-seqs 64 --chunk 512 --max-prefill-tokens 2048 --capacity C --max-queue 256]
               [--manifest M --kernels K --weights W --tokenizer T --gpu I --eager]
    kern-serve bench [--url http://127.0.0.1:8000/v1] [--concurrency 1,4,16,32,64] …

Every error is one line and a nonzero exit: 2 for bad input, 1 for a failure while running
(no GPU, the engine process died)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from kern_manifest import KernError, fail

from .adapter import DEFAULT_FACTORY

app = typer.Typer(add_completion=False, no_args_is_help=False,
                  help="An OpenAI-compatible HTTP server (/v1/completions, "
                       "/v1/chat/completions, /v1/models, /health, /metrics) on kern's "
                       "batched engine. Without model options: the bundled SmolLM2-135M.",
                  epilog="Exit status: 0 stopped by SIGTERM or Ctrl-C after draining; 1 the "
                         "engine failed (no usable GPU, the engine process died) or the "
                         "address is taken; 2 bad input or usage (options, files, a manifest "
                         "outside the contract).")


def _fail(err: Exception) -> None:
    if isinstance(err, KernError):
        fail("kern-serve", err)
    raise err


def _engine_options(items: list[str]) -> dict[str, str]:
    from kern_run.errors import KernRunError
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise KernRunError(f"--engine-option `{item}`: give KEY=VALUE")
        out[key] = value
    return out


@app.callback(invoke_without_command=True)
def main_command(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    served_model_name: Annotated[Optional[str], typer.Option(help="the model name clients use (default: the manifest's model label)")] = None,
    api_key: Annotated[Optional[str], typer.Option(help="require `Authorization: Bearer KEY` on /v1/*", envvar="KERN_SERVE_API_KEY")] = None,
    max_seqs: Annotated[int, typer.Option(help="sequences in one engine step (the largest batch bucket)")] = 64,
    chunk: Annotated[int, typer.Option(help="prefill chunk in tokens")] = 512,
    max_prefill_tokens: Annotated[int, typer.Option(help="prefill tokens per engine step")] = 2048,
    capacity: Annotated[Optional[int], typer.Option(help="KV pool in tokens (default: kern-run's choice: what fits in free GPU memory)")] = None,
    max_queue: Annotated[int, typer.Option(help="requests waiting beyond --max-seqs before new ones get 503")] = 256,
    manifest: Annotated[Optional[Path], typer.Option(help="manifest.json (Qwen3/Llama caller contract)")] = None,
    kernels: Annotated[Optional[Path], typer.Option(help="kernels folder (default: kernels/ beside the manifest)")] = None,
    weights: Annotated[Optional[list[Path]], typer.Option(help="safetensors weights (repeat for several)")] = None,
    tokenizer: Annotated[Optional[Path], typer.Option(help="the model's GGUF, tokenizer.json, or a folder holding one")] = None,
    gpu: Annotated[int, typer.Option(help="CUDA device index")] = 0,
    eager: Annotated[bool, typer.Option("--eager", help="launch step by step, no CUDA graphs")] = False,
    engine_factory: Annotated[str, typer.Option(hidden=True, help="module:function building the engine in the engine process (tests: kern_serve.adapter:open_fake)")] = DEFAULT_FACTORY,
    engine_option: Annotated[Optional[list[str]], typer.Option(hidden=True, help="KEY=VALUE for the engine factory")] = None,
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    from .server import ServeOptions, serve
    try:
        opts = ServeOptions(host=host, port=port, served_model_name=served_model_name,
                            api_key=api_key, max_seqs=max_seqs, chunk=chunk,
                            max_prefill_tokens=max_prefill_tokens, capacity=capacity,
                            max_queue=max_queue, manifest=manifest, kernels=kernels,
                            weights=list(weights or []), tokenizer=tokenizer, gpu=gpu,
                            eager=eager, engine_factory=engine_factory,
                            engine_options=_engine_options(list(engine_option or [])))
        code = serve(opts)
    except Exception as err:
        _fail(err)
        return
    raise typer.Exit(code)


@app.command("bench")
def bench_command(
    url: Annotated[Optional[str], typer.Option(help="an already running kern-serve's base URL (default: start one on a free loopback port with the model options below)")] = None,
    concurrency: Annotated[str, typer.Option(help="closed-loop client counts, comma-separated")] = "1,4,16,32,64",
    input_len: Annotated[int, typer.Option(help="prompt length in tokens (random token ids)")] = 1024,
    output_len: Annotated[int, typer.Option(help="generated tokens per request (ignore_eos)")] = 128,
    requests: Annotated[int, typer.Option(help="requests per level: at least this many, and 8 × the concurrency")] = 0,
    max_seconds: Annotated[float, typer.Option(help="time bound per level (requests still running then are awaited)")] = 120.0,
    engine: Annotated[bool, typer.Option("--engine/--no-engine", help="also run the same load through the engine in-process (needs the model options; not with --url)")] = True,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="write the results as JSON")] = None,
    seed: Annotated[int, typer.Option(help="seed of the random prompts")] = 0,
    manifest: Annotated[Optional[Path], typer.Option(help="manifest.json")] = None,
    kernels: Annotated[Optional[Path], typer.Option(help="kernels folder")] = None,
    weights: Annotated[Optional[list[Path]], typer.Option(help="safetensors weights")] = None,
    tokenizer: Annotated[Optional[Path], typer.Option(help="tokenizer")] = None,
    capacity: Annotated[Optional[int], typer.Option(help="KV pool in tokens")] = None,
    max_seqs: Annotated[int, typer.Option(help="--max-seqs of the server and the engine")] = 64,
    gpu: Annotated[int, typer.Option(help="CUDA device index")] = 0,
    engine_factory: Annotated[str, typer.Option(hidden=True)] = DEFAULT_FACTORY,
    engine_option: Annotated[Optional[list[str]], typer.Option(hidden=True)] = None,
) -> None:
    """Closed-loop load through the server (openai.AsyncOpenAI, streaming) and, in the same
    run, through the engine in-process: TTFT, TPOT, ITL percentiles and output tok/s."""
    from .bench import BenchOptions, run_bench
    from .server import ServeOptions
    try:
        serve_opts = ServeOptions(port=0, manifest=manifest, kernels=kernels,
                                  weights=list(weights or []), tokenizer=tokenizer,
                                  capacity=capacity, max_seqs=max_seqs, gpu=gpu,
                                  engine_factory=engine_factory,
                                  engine_options=_engine_options(list(engine_option or [])))
        report = run_bench(BenchOptions(url=url, concurrency=concurrency, input_len=input_len,
                                        output_len=output_len, requests=requests,
                                        max_seconds=max_seconds, engine=engine, seed=seed,
                                        serve=serve_opts))
    except Exception as err:
        _fail(err)
        return
    print(report.table())
    if json_out is not None:
        json_out.write_text(report.json())
    sys.stdout.flush()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
