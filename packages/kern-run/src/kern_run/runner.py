"""One ``kern-run`` invocation, from options to generated text: every check that needs no GPU
first (options, files, the manifest against the caller contract, tokenizer, prompt length vs
capacity or the model's fixed context), then the GPU probe, then the default model's weight
export (first use only), load, and generation with streaming."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from .errors import KernRunError, NoGpuError


class SpecCheckFailed(RuntimeError):
    """``--spec-check`` found a divergence that is not a bf16 near-tie (a bug)."""

DEFAULT_PROMPT = "The capital of France is"


@dataclass
class RunOptions:
    manifest: Path | None = None
    kernels: Path | None = None
    weights: list[Path] = field(default_factory=list)
    tokenizer: Path | None = None
    prompt: str = DEFAULT_PROMPT
    steps: int = 64
    chunk: int = 512
    capacity: int | None = None  # None: kern_run.capacity.choose's default
    eager: bool = False
    chat: bool = False
    gpu: int = 0
    summary: bool = False
    spec: str | None = None      # "auto" (bare --spec), "dspark", "ngram" (spec.setup)
    spec_k: int | None = None    # drafts per round (default: 7 for ngram, the block for dspark)
    spec_ngram: tuple[int, int] = (2, 4)
    spec_check: bool = False     # also plain greedy in the same process, first divergence


@dataclass
class Model:
    manifest: Path
    kernels: Path
    weights: list[Path]          # empty for the default until exported
    tokenizer: Path
    default: bool = False
    plan: Path | None = None
    example: str = ""            # the bundled example's name (default only)
    note: str | None = None      # printed at start-up (which example --spec picked)


def probe_gpu() -> tuple[bool, str]:
    from kern_runtime import gpu_available
    return gpu_available()


def check_options(o: RunOptions) -> None:
    problems = []
    if o.steps < 1:
        problems.append(f"--steps must be at least 1 (got {o.steps})")
    if o.chunk < 1:
        problems.append(f"--chunk must be at least 1 (got {o.chunk})")
    if o.capacity is not None and o.capacity < 2:
        problems.append(f"--capacity must be at least 2 tokens (got {o.capacity})")
    if o.gpu < 0:
        problems.append(f"--gpu must be a device index ≥ 0 (got {o.gpu})")
    if not o.prompt:
        problems.append("--prompt is empty")
    if o.spec is not None and o.spec not in ("auto", "dspark", "ngram"):
        problems.append(f"--spec {o.spec!r}: give no value (DSpark when the manifest has a "
                        f"draft, else ngram), dspark or ngram")
    if o.spec_check and o.spec is None:
        problems.append("--spec-check needs --spec")
    if problems:
        raise KernRunError(*problems)


def resolve_model(o: RunOptions) -> Model:
    """Explicit files (``--manifest`` given: ``--weights`` and ``--tokenizer`` required,
    ``--kernels`` defaults to ``kernels/`` beside the manifest) or the bundled default."""
    explicit = [o.manifest, o.kernels, o.tokenizer] + list(o.weights)
    if all(x is None for x in explicit):
        from .defaults import default_example, example_files, gguf_path
        name, note = default_example(o.spec)
        manifest, kernels, plan = example_files(name)
        return Model(manifest, kernels, [], gguf_path(), default=True, plan=plan,
                     example=name, note=note)
    problems = []
    if o.manifest is None:
        problems.append("--manifest is required when any of --kernels, --weights, --tokenizer "
                        "is given (or give none of them for the bundled default)")
    kernels = o.kernels if o.kernels is not None else (
        o.manifest.parent / "kernels" if o.manifest is not None else None)
    if not o.weights:
        problems.append("--weights is required with --manifest (a safetensors file; repeat "
                        "for several)")
    if o.tokenizer is None:
        problems.append("--tokenizer is required with --manifest (a .gguf file, a "
                        "tokenizer.json, or a folder holding one)")
    if o.manifest is not None and not o.manifest.is_file():
        problems.append(f"--manifest `{o.manifest}`: no such file")
    if o.kernels is not None and not o.kernels.is_dir():
        problems.append(f"--kernels `{o.kernels}`: no such directory")
    elif o.kernels is None and o.manifest is not None and o.manifest.is_file() \
            and not kernels.is_dir():  # type: ignore[union-attr]
        problems.append(f"--kernels not given and `{kernels}` (beside the manifest) is no "
                        f"directory")
    for w in o.weights:
        if not w.is_file():
            problems.append(f"--weights `{w}`: no such file")
    if o.tokenizer is not None and not o.tokenizer.exists():
        problems.append(f"--tokenizer `{o.tokenizer}`: no such file or directory")
    if problems:
        raise KernRunError(*problems)
    return Model(o.manifest, kernels, list(o.weights), o.tokenizer)  # type: ignore[arg-type]


def read_contract(manifest: Path):
    from kern_manifest import ManifestError, load, render_human
    from kern_manifest.contract import check_manifest
    try:
        vm = load(manifest)
    except ManifestError as err:
        text = render_human(err.diagnostics, err.source) if err.diagnostics else str(err)
        raise KernRunError(f"--manifest `{manifest}` does not verify:\n{text.rstrip()}") from None
    except OSError as err:
        raise KernRunError(f"--manifest `{manifest}`: cannot read: {err.strerror or err}") from None
    return vm, check_manifest(vm.manifest)


@dataclass
class Outcome:
    result: object          # generate.Result
    text: str
    stats: str


def run(o: RunOptions, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
        runtime_factory: Callable | None = None) -> Outcome:
    """Everything ``kern-run`` does; streams generated text to ``out``, notes to ``err``."""
    from . import capacity as CAP
    from .chunks import check_capacity
    from .tokenizer import load_tokenizer

    check_options(o)
    model = resolve_model(o)
    if model.note:
        err.write(model.note + "\n")
    vm, info = read_contract(model.manifest)
    tok = load_tokenizer(model.tokenizer)
    if info.vocab is not None and tok.vocab_size > info.vocab:
        raise KernRunError(f"--tokenizer has {tok.vocab_size} tokens; the manifest's logits "
                           f"cover {info.vocab}: they do not belong to the same model")
    ids = tok.encode(tok.chat_prompt(o.prompt) if o.chat else o.prompt)
    if not ids:
        raise KernRunError("--prompt encodes to no tokens")
    cap = CAP.choose(o.capacity, info)       # the limits; GPU memory is checked below
    check_capacity(len(ids), o.steps, cap.limit, fixed=info.context is not None)
    plan = _spec_plan(o, model, vm, info)
    if runtime_factory is None:
        cap, runtime_factory = _on_the_gpu(vm, model, o, info, cap, len(ids))
    err.write(cap.line() + "\n")
    if model.default:
        from .defaults import ensure_weights
        draft = [plan.draft_file] if plan is not None and plan.draft_file else []
        model.weights = [ensure_weights(model.manifest, model.plan, model.tokenizer,
                                        log=lambda s: err.write(s + "\n"), provided=draft,
                                        example=model.example), *draft]
    rt = runtime_factory(vm, model.kernels, weights=model.weights, capacity=cap.load,
                         device=o.gpu)
    try:
        if o.summary:
            err.write(rt.summary().rstrip() + "\n")
        common = dict(steps=o.steps, chunk=o.chunk, max_tokens=info.max_tokens,
                      eos=tok.eos_ids, eager=o.eager, capacity=cap.limit,
                      fixed_context=info.context is not None, vocab=info.vocab,
                      table_pages=info.table_pages)
        res, report, text = _stream(rt, ids, o, plan, common, tok, out)
    finally:
        close = getattr(rt, "close", None)
        if close is not None:
            close()
    stats = render_stats(res, o, info.max_tokens, plan.drafter if plan else None)
    if plan is not None:
        stats += "\n" + "\n".join(res.spec.lines())
    if report is not None:
        plain = report.plain
        stats += (f"\nplain greedy in the same process: decode "
                  f"{plain.decode_ms_per_token or 0:.3f} ms/token; " + report.describe())
    err.write(stats + "\n")
    if report is not None and report.bug:
        raise SpecCheckFailed(report.describe())
    return Outcome(res, text, stats)


def _spec_plan(o: RunOptions, model: Model, vm, info):
    """The checked speculation plan of ``--spec`` (None without it); an explicit DSpark
    manifest's ``draft.safetensors`` joins ``--weights`` unless it is given there."""
    if o.spec is None:
        return None
    from .spec.setup import plan_spec
    plan = plan_spec(o.spec, o.spec_k, o.spec_ngram, model.manifest, vm.manifest, info)
    draft = plan.draft_file
    if draft is not None and not model.default and \
            draft.resolve() not in {w.resolve() for w in model.weights}:
        model.weights.append(draft)
    return plan


def _stream(rt, ids: list[int], o: RunOptions, plan, common: dict, tok, out: TextIO):
    """Generate (plain, speculative, or both for --spec-check), streaming the text to
    ``out``: (the streamed run's result, the check report or None, the generated text)."""
    stream = tok.stream()
    pieces: list[str] = []

    def emit(t: int) -> None:
        s = stream.push(t)
        if s:
            pieces.append(s)
            out.write(s)
            out.flush()

    if not o.chat:
        out.write(o.prompt)
        out.flush()
    res, report = _generate(rt, ids, o, plan, {**common, "on_token": emit})
    tail = stream.flush()
    if tail:
        pieces.append(tail)
        out.write(tail)
    out.write("\n")
    out.flush()
    return res, report, "".join(pieces)


def _on_the_gpu(vm, model: Model, o: RunOptions, info, cap, n_prompt: int):
    """The files checked, then the GPU probed and the capacity fitted to its free memory:
    (the capacity, ``Runtime.load``)."""
    from . import capacity as CAP
    from .chunks import check_capacity
    arena = check_artifacts(vm, model, cap.load)
    ok, why = probe_gpu()
    if not ok:
        raise NoGpuError(f"no usable GPU here ({why}); kern-run needs an NVIDIA GPU with "
                         f"the CUDA driver")
    from kern_runtime import Runtime, gpu_memory
    free, _ = gpu_memory(o.gpu)
    cap = CAP.choose(o.capacity, info, base_bytes=arena - cap.kv_bytes, free_bytes=free)
    check_capacity(n_prompt, o.steps, cap.limit, fixed=info.context is not None)
    return cap, Runtime.load


def check_artifacts(vm, model: Model, capacity: int | None) -> int:
    """Everything about the files that needs no GPU, before the GPU probe (issue 17, item 6):
    cubins present and matching their sha256 pins and, for explicit weights, the safetensors
    headers against the manifest's weight buffers (symbols resolve only in a loaded module;
    the bundled default's weights are exported from the GGUF on first use, after the probe).
    Returns the arena's bytes at ``capacity`` (weights, workspaces, states)."""
    from kern_runtime.memory_plan import plan_memory
    if model.default:
        from kern_runtime.artifacts import read_cubins
        read_cubins(vm, model.kernels)
        return plan_memory(vm, capacity).total
    from kern_runtime import prepare
    return prepare(vm, model.kernels, model.weights, capacity).plan.total


def _generate(rt, ids: list[int], o: RunOptions, plan, common: dict):
    """Plain greedy, or speculation (``--spec``), or both (``--spec-check``):
    (the streamed run's result, the check report or None)."""
    if plan is None:
        from .generate import generate
        return generate(rt, ids, **common), None
    from .spec import spec_check
    from .spec.setup import speculate
    # GPU events need the chained loop; a manifest with the in-graph acceptance runs the
    # faster pipelined rounds instead, split by host clocks only (kern-run bench --spec
    # prints the GPU split of the same programs)
    loop = speculate(plan, rt, gpu_times=not plan.accept)
    if o.spec_check:
        report = spec_check(rt, ids, speculate=loop, **common)
        return report.spec, report
    return loop(rt, ids, **common), None


def render_stats(res, o: RunOptions, max_tokens: int, drafter: str | None = None) -> str:
    from .chunks import clamp_chunk
    mode = ("eager" if o.eager else "graphs") + (f", spec {drafter}" if drafter else "")
    parts = [f"prompt {len(res.prompt)} tokens"]
    if res.prefill_tokens:
        tps = res.prefill_tokens_per_s
        parts.append(f"prefill {1000 * res.prefill_s:.1f} ms (chunk "
                     f"{clamp_chunk(o.chunk, max_tokens)}"
                     + (f", {tps:,.0f} tok/s)" if tps else ")"))
    parts.append(f"time to first token {1000 * res.ttft_s:.1f} ms")
    if res.decode_tokens:
        parts.append(f"decode {res.decode_ms_per_token:.3f} ms/token "
                     f"({res.tokens_per_s:,.1f} tok/s)")
    why = "EOS" if res.stop == "eos" else f"--steps {o.steps}"
    parts.append(f"{res.produced} tokens generated, stopped at {why}")
    if res.capture_s:
        parts.append(f"graph capture {1000 * res.capture_s:.0f} ms")
    return f"kern-run [{mode}]: " + " · ".join(parts)
