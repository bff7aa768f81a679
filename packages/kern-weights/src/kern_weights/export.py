"""Export: resolve every manifest weight to a recipe (checking everything before a byte is
written), then stream the tensors into one safetensors file. :func:`export` takes what is
already read; :func:`export_files` reads the manifest, the plan and the source from files,
the one way every caller (``kern-gen export``, kern-run's default model, the device checks)
exports."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kern_manifest import Manifest, ManifestError, read, shape_at
from kern_manifest.expr import corners

from .arrays import STORAGE, Array, can_convert, convert, convert_into
from .derived import DERIVED, Thunk
from .errors import ExportError
from .export_plan import Plan, Rule
from .sources import Source, missing, open_source, read_safetensors_header
from .writer import SafetensorsWriter, Slot


@dataclass(frozen=True)
class Recipe:
    """How one output tensor is made: ``parts`` (source names, concatenated along dim 0)
    or ``thunk`` (a derived tensor)."""

    slot: Slot
    rule: Rule
    parts: tuple[str, ...] = ()
    thunk: Thunk | None = None


@dataclass(frozen=True)
class Progress:
    index: int  # tensors written so far
    count: int
    name: str  # the tensor just written
    done: int  # bytes written so far
    total: int
    elapsed: float


@dataclass(frozen=True)
class Summary:
    out: Path
    tensors: int
    bytes: int
    seconds: float
    unused: list[str]  # source tensors no weight used
    provided: tuple[str, ...] = ()  # weights skipped: another file provides them


def read_manifest(path: str | os.PathLike) -> Manifest:
    try:
        return read(path)
    except ManifestError as err:
        raise ExportError(f"manifest: {err}") from None
    except OSError as err:
        raise ExportError(f"manifest `{path}`: cannot read: {err.strerror or err}") from None


def weight_slots(manifest: Manifest) -> list[Slot]:
    """The manifest's ``weight`` buffers as output slots, in declaration order. A symbol
    dimension takes the symbol's maximum (the size the runtime allocates and binds)."""
    _, hi = corners(manifest.symbols)
    return [Slot(name, b.dtype, shape_at(b.shape, hi))
            for name, b in manifest.buffers.items() if b.cls == "weight"]


def _resolve(slot: Slot, rule: Rule, source: Source, elsewhere: str = "") -> Recipe:
    what = f"weight `{slot.name}` ({rule.origin})"
    if rule.kind == "derived":
        prep = DERIVED.get(rule.derived)
        if prep is None:
            raise ExportError(f"{what}: unknown derived tensor `{rule.derived}` "
                              f"(known: {', '.join(sorted(DERIVED))})")
        return Recipe(slot, rule, thunk=prep(rule.params, source.config, slot.shape, what))
    infos = source.tensors()
    problems = [f"{what}: {missing(source, n, elsewhere)}" for n in rule.sources
                if n not in infos]
    if problems:
        raise ExportError(*problems)
    parts = [infos[n] for n in rule.sources]
    for p in parts:
        if not can_convert(p.dtype, slot.dtype):
            raise ExportError(f"{what}: source `{p.name}` is {p.dtype}, which cannot be "
                              f"converted to the manifest's {slot.dtype}")
    desc = " + ".join(f"`{p.name}` {list(p.shape)}" for p in parts)
    if len(parts) == 1:
        ok = parts[0].shape == slot.shape
    else:
        ok = (len(slot.shape) >= 1 and all(len(p.shape) == len(slot.shape)
                                           and p.shape[1:] == slot.shape[1:] for p in parts)
              and sum(p.shape[0] for p in parts) == slot.shape[0])
    if not ok:
        how = "source" if len(parts) == 1 else "concatenation along dim 0 of"
        raise ExportError(f"{what}: manifest declares {slot.dtype}{list(slot.shape)}, "
                          f"{how} {desc} does not give that shape")
    return Recipe(slot, rule, parts=tuple(rule.sources))


def make_recipes(manifest: Manifest, source: Source, plan: Plan,
                 provided: Mapping[str, str] | None = None) -> list[Recipe]:
    """A recipe for every weight of ``manifest`` but those in ``provided`` (weight name ->
    the file that holds it: the caller loads that file beside the export, e.g. a DSpark
    draft's ``draft.safetensors``); every problem found is raised at once."""
    provided = provided or {}
    slots = [s for s in weight_slots(manifest) if s.name not in provided]
    if not slots:
        raise ExportError("manifest declares no `weight` buffers; nothing to export"
                          if not provided else "every weight of the manifest is provided "
                          "by the given files; nothing to export")
    names = set(source.tensors())
    files = sorted(set(provided.values()))
    elsewhere = (f", nor in {', '.join(f'`{f}`' for f in files)}" if files else "")
    recipes, problems = [], []
    for slot in slots:
        try:
            recipes.append(_resolve(slot, plan.rule(slot.name, names, dict(source.config)),
                                    source, elsewhere))
        except ExportError as err:
            problems.extend(err.problems)
    if problems:
        raise ExportError(*problems)
    return recipes


def produce(recipe: Recipe, source: Source) -> np.ndarray:
    """The output tensor of ``recipe``, in the storage of its dtype. Conversion goes chunk
    by chunk into the output, so the peak is the output plus one loaded source tensor."""
    slot = recipe.slot
    what = f"weight `{slot.name}`"
    if recipe.thunk is not None:
        return convert(recipe.thunk(), slot.dtype, what)
    if len(recipe.parts) == 1:
        a = source.load(recipe.parts[0])
        _check_loaded(a, recipe.parts[0], source)
        return convert(a, slot.dtype, what)
    out = np.empty(slot.shape, dtype=STORAGE[slot.dtype])
    row = 0
    for name in recipe.parts:
        a = source.load(name)
        _check_loaded(a, name, source)
        n = a.shape[0]
        convert_into(a, out[row:row + n], slot.dtype, f"{what} (part `{name}`)")
        row += n
        del a
    return out


def _check_loaded(a: Array, name: str, source: Source) -> None:
    info = source.tensors()[name]
    if a.shape != info.shape or a.dtype != info.dtype:
        raise ExportError(f"{source.where}: tensor `{name}` loaded as {a.dtype}{list(a.shape)}, "
                          f"its header says {info.dtype}{list(info.shape)}")


def export(manifest: Manifest, source: Source, out: str | os.PathLike, plan: Plan | None = None,
           *, progress: Callable[[Progress], Any] | None = None,
           metadata: dict[str, str] | None = None,
           provided: Mapping[str, str] | None = None) -> Summary:
    """Write every weight of ``manifest`` from ``source`` into the safetensors file ``out``,
    but those ``provided`` by another file (:func:`make_recipes`)."""
    t0 = time.monotonic()
    recipes = make_recipes(manifest, source, plan or Plan(), provided)
    used = {n for r in recipes for n in r.parts}
    unused = sorted(set(source.tensors()) - used)
    meta = {"format": "pt", "producer": "kern-gen export", "model": manifest.meta.model}
    meta.update(metadata or {})
    slots = [r.slot for r in recipes]
    done = 0
    with SafetensorsWriter(out, slots, meta) as w:
        for i, r in enumerate(recipes):
            w.write(r.slot.name, produce(r, source))
            done += r.slot.nbytes
            if progress is not None:
                progress(Progress(i + 1, len(recipes), r.slot.name, done, w.total,
                                  time.monotonic() - t0))
    return Summary(Path(out), len(recipes), done, time.monotonic() - t0, unused,
                   tuple(sorted(provided or {})))


def export_files(manifest: Manifest | str | os.PathLike, source: Source | str | os.PathLike,
                 out: str | os.PathLike, plan: Plan | str | os.PathLike | None = None, *,
                 progress: Callable[[Progress], Any] | None = None,
                 metadata: dict[str, str] | None = None,
                 provided: Sequence[str | os.PathLike] = ()) -> Summary:
    """:func:`export` from files: ``manifest`` a path (or a read :class:`Manifest`),
    ``source`` a path — a directory is a Hugging Face checkpoint, a file a GGUF file — (or an
    open :class:`Source`), ``plan`` a plan file (or a :class:`Plan`; None: the default plan).
    ``provided``: safetensors files loaded beside the export (e.g. a DSpark draft's
    ``draft.safetensors``): the manifest weights they hold by name are not exported (their
    dtype and shape are checked where the files are loaded). Every problem is an
    :class:`ExportError` naming the file."""
    m = manifest if isinstance(manifest, Manifest) else read_manifest(manifest)
    have = {name: str(f) for f in provided for name in read_safetensors_header(f)}
    declared = {s.name for s in weight_slots(m)}
    given = {n: f for n, f in have.items() if n in declared}
    p = plan if isinstance(plan, Plan) or plan is None else Plan.read(plan)
    if isinstance(source, (str, os.PathLike)):
        source = open_source(hf=source) if Path(source).is_dir() else open_source(gguf=source)
    return export(m, source, out, p, progress=progress, metadata=metadata, provided=given)
