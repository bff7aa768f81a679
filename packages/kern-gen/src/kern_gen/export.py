"""The ``kern-gen export`` command (registered on the app in :mod:`kern_gen.cli`); the
exporter itself is :mod:`kern_weights`.

The names this module had as a package (``kern_gen.export.export``, ``Plan``, ...) are
re-exported from :mod:`kern_weights`, so code written against them keeps working.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from kern_manifest import KernError, fail
from kern_weights import (Array, ExportError, HFSource, Plan, Progress, Recipe, SafetensorsWriter,
                          Slot, Source, Summary, TensorInfo, bf16_to_f32, convert, export,
                          export_files, f32_to_bf16, make_recipes, open_source, read_manifest,
                          weight_slots)

__all__ = [
    "Array", "ExportError", "HFSource", "Plan", "Progress", "Recipe", "SafetensorsWriter",
    "Slot", "Source", "Summary", "TensorInfo", "bf16_to_f32", "convert", "export",
    "export_command", "f32_to_bf16", "make_recipes", "open_source", "read_manifest",
    "weight_slots",
]

#: Exports at least this large show progress on stderr by default.
PROGRESS_BYTES = 64 * 2**20


class _Printer:
    """Progress lines on stderr, at most a few per second (carriage returns on a tty)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        final = p.index == p.count
        if not final and now - self.last < (0.2 if self.tty else 2.0):
            return
        self.last = now
        mib = 2**20
        line = (f"kern-gen export: [{p.index}/{p.count}] {p.done / mib:.1f}/{p.total / mib:.1f} "
                f"MiB  {p.name}")
        if self.tty:
            sys.stderr.write("\r\x1b[K" + line + ("\n" if final else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def export_command(
    manifest: Annotated[Path, typer.Option("--manifest", "-m", help="kern manifest (JSON)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="safetensors file to write")],
    hf: Annotated[Optional[Path], typer.Option(
        "--hf", help="Hugging Face checkpoint directory (*.safetensors, config.json)")] = None,
    gguf: Annotated[Optional[Path], typer.Option("--gguf", help="GGUF file")] = None,
    plan: Annotated[Optional[Path], typer.Option(
        "--plan", help="JSON plan: merged projections, tied or derived weights "
                       "(see kern_weights.export_plan)")] = None,
    progress: Annotated[Optional[bool], typer.Option(
        "--progress/--no-progress",
        help=f"progress on stderr (default: for exports of {PROGRESS_BYTES >> 20} MiB or more)"
    )] = None,
) -> None:
    """Export a manifest's weights from an HF checkpoint or a GGUF file to safetensors.

    Every `weight` buffer is written with the manifest's name, dtype and shape.
    """
    try:
        m = read_manifest(manifest)
        p = Plan.read(plan) if plan is not None else Plan()
        src = open_source(hf=hf, gguf=gguf)
        total = sum(s.nbytes for s in weight_slots(m))
        show = progress if progress is not None else total >= PROGRESS_BYTES
        summary = export_files(m, src, out, p, progress=_Printer() if show else None)
    except KernError as err:
        fail("kern-gen export", err)
    unused = f"; {len(summary.unused)} source tensors unused" if summary.unused else ""
    sys.stderr.write(f"kern-gen export: wrote {summary.tensors} tensors, "
                     f"{summary.bytes / 2**20:.1f} MiB to {summary.out} in "
                     f"{summary.seconds:.1f} s{unused}\n")
