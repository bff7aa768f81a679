"""The ``kern-train`` command (Typer), thin: parse, call :mod:`kern_train.dspark`, print.

    kern-train prompts --out prompts.jsonl.gz [--wheels DIR] [--exclude prompts.json]
    kern-train data    --target gguf:FILE --prompts prompts.jsonl.gz --out seqs.npz
    kern-train fit     --target gguf:FILE --data seqs.npz --out DIR   (fit → held-out τ → export)
    kern-train eval    --target gguf:FILE --data seqs.npz --draft DIR
    kern-train random  --config config.json --out DIR                 (numpy only, no torch)

Bad input is one line on stderr and exit 2; nothing else is caught.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .dspark.config import DSparkError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Train a DSpark draft for a kern target (docs/dspark.md).",
                  epilog="Exit status: 0 done; 2 bad input (the message names the file, key "
                         "or option).")

Target = Annotated[str, typer.Option(help="gguf:FILE | an HF folder | tiny (a random test "
                                          "Llama)")]
Device = Annotated[str, typer.Option(help="torch device")]
Seed = Annotated[int, typer.Option(help="seed of every random choice")]


def _run(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except DSparkError as e:
        print(f"kern-train: {e}", file=sys.stderr)
        raise typer.Exit(2) from None


def _target(spec: str, device: str, seed: int):
    import torch

    from .dspark.target import load_target
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise DSparkError(f"--device {device}: no CUDA device")
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    return load_target(spec, device, dtype, seed)


@app.command()
def prompts(out: Annotated[Path, typer.Option(help="prompts file to write (.jsonl.gz)")],
            wheels: Annotated[Optional[Path], typer.Option(help="read the packages' wheels "
                                                           "from this folder")] = None,
            exclude: Annotated[Optional[Path], typer.Option(help="kern-run's prompts.json: "
                                                            "its records are left out")] = None,
            sharegpt: Annotated[int, typer.Option(help="ShareGPT prompts kept")] = 24000,
            eval_fraction: Annotated[float, typer.Option(help="held-out share per source")] = 0.03,
            seed: Seed = 0) -> None:
    """Prompts from the installable packages, split train/eval by prompt."""
    from .dspark import prompts as P

    def go():
        ex = P.bench_records(exclude) if exclude else set()
        lines = P.build(seed=seed, sharegpt_count=sharegpt, eval_fraction=eval_fraction,
                        wheels=wheels, exclude=ex)
        P.write(out, lines)
        print(json.dumps(lines[0]))
    _run(go)


@app.command()
def data(target: Target, prompts: Annotated[Path, typer.Option(help="prompts file")],
         out: Annotated[Path, typer.Option(help="sequences file to write (.npz)")],
         new_tokens: Annotated[int, typer.Option(help="greedy tokens per prompt")] = 192,
         max_prompt_tokens: Annotated[int, typer.Option(help="longer prompts are skipped")] = 320,
         batch: Annotated[int, typer.Option(help="prompts per generate call")] = 256,
         seconds: Annotated[float, typer.Option(help="budget (held-out prompts always run)")] = 180,
         device: Device = "cuda", seed: Seed = 0) -> None:
    """Greedy continuations of the prompts by the target."""
    from .dspark import data as D
    from .dspark import prompts as P

    def go():
        header, records = P.read(prompts)
        t = _target(target, device, seed)
        D.generate(t, header, records, new_tokens=new_tokens, max_prompt_tokens=max_prompt_tokens,
                   batch=batch, seconds=seconds, seed=seed).save(out)
    _run(go)


@app.command()
def fit(target: Target, data: Annotated[Path, typer.Option(help="sequences file")],
        out: Annotated[Path, typer.Option(help="folder for draft.safetensors + dspark.json")],
        layers: Annotated[int, typer.Option(help="draft layers (1..5)")] = 2,
        markov_rank: Annotated[int, typer.Option(help="Markov head rank")] = 64,
        mask_token_id: Annotated[Optional[int], typer.Option(help="default: the tokenizer's "
                                                             "mask/unk token")] = None,
        name: Annotated[Optional[str], typer.Option(help="the target's model id in "
                                                    "dspark.json")] = None,
        steps: int = 1000, seconds: float = 300.0, batch: int = 32, anchors: int = 32,
        lr: float = 1e-3, warmup: int = 50, log_every: int = 50,
        eval_anchors: Annotated[int, typer.Option(help="anchors per held-out sequence")] = 16,
        max_bytes: Annotated[int, typer.Option(help="weight file limit (0: none)")] = 32_000_000,
        report: Annotated[Optional[Path], typer.Option(help="write the report JSON here")] = None,
        source_weight: Annotated[Optional[list[str]], typer.Option(
            help="SOURCE=W: draw that source's training sequences W times as often "
                 "(repeatable; e.g. gsm8k=4)")] = None,
        device: Device = "cuda", seed: Seed = 0) -> None:
    """Train, measure offline τ on the held-out split, export both files."""
    from .dspark.data import Sequences
    from .dspark.pipeline import new_draft, train_and_export
    from .dspark.train import FitConfig

    def go():
        weights = _source_weights(source_weight or [])
        seqs = Sequences.load(data)
        t = _target(target, device, seed)
        draft = new_draft(t, layers=layers, markov_rank=markov_rank, mask_token_id=mask_token_id,
                          seed=seed, name=name)
        cfg = FitConfig(steps=steps, seconds=seconds, batch=batch, anchors=anchors, lr=lr,
                        warmup=warmup, seed=seed, log_every=log_every,
                        source_weights=weights)
        rep = train_and_export(t, draft, seqs, cfg, out, eval_anchors=eval_anchors,
                               max_bytes=max_bytes or None)
        if report:
            report.write_text(json.dumps(rep, indent=2) + "\n")
    _run(go)


def _source_weights(items: list[str]) -> tuple[tuple[str, float], ...]:
    """``SOURCE=W`` options as (source, weight) pairs; a malformed one is a one-line error."""
    out = []
    for it in items:
        name, eq, w = it.partition("=")
        try:
            out.append((name, float(w)))
        except ValueError:
            eq = ""
        if not eq or not name:
            raise DSparkError(f"--source-weight `{it}`: expected SOURCE=WEIGHT, e.g. gsm8k=4")
    return tuple(out)


@app.command("eval")
def eval_(target: Target, data: Annotated[Path, typer.Option(help="sequences file")],
          draft: Annotated[Path, typer.Option(help="folder with draft.safetensors + dspark.json")],
          anchors: int = 16, device: Device = "cuda", seed: Seed = 1) -> None:
    """Offline τ of an exported draft on the held-out split."""
    from .dspark.config import read_config
    from .dspark.data import Sequences
    from .dspark.evaluate import evaluate
    from .dspark.pipeline import load_draft

    def go():
        cfg = read_config(draft / "dspark.json")
        seqs = Sequences.load(data)
        t = _target(target, device, 0)
        d = load_draft(t, cfg, draft / "draft.safetensors")
        print(json.dumps(evaluate(t, d, seqs, anchors=anchors, seed=seed)))
    _run(go)


@app.command()
def random(config: Annotated[Path, typer.Option(help="the target's HF config.json")],
           out: Annotated[Path, typer.Option(help="folder for draft.safetensors + dspark.json")],
           target: Annotated[str, typer.Option(help="the target's model id")] = "unknown",
           layers: int = 2, markov_rank: int = 64,
           mask_token_id: Annotated[int, typer.Option(help="the block's mask token")] = 0,
           seed: Seed = 0) -> None:
    """Seeded random draft weights for any target geometry (plumbing tests)."""
    from .dspark.config import read_geometry
    from .dspark.export import export
    from .dspark.random_init import random_arrays, random_config

    def go():
        g = read_geometry(config)
        if not 1 <= layers <= 5:
            raise DSparkError(f"--layers: expected 1..5, got {layers}")
        if markov_rank < 1 or not 0 <= mask_token_id < g.vocab:
            raise DSparkError(f"--markov-rank / --mask-token-id: expected rank ≥ 1 and a token "
                              f"below {g.vocab}, got {markov_rank} / {mask_token_id}")
        cfg = random_config(g, target, layers=layers, markov_rank=markov_rank,
                            mask_token_id=mask_token_id, seed=seed)
        size = export(out, g, cfg, random_arrays(g, cfg))
        print(f"{out}/draft.safetensors: {size} bytes; {out}/dspark.json")
    _run(go)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
