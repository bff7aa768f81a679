"""Weight binding: match the manifest's ``weight`` buffers to tensors in safetensors files.

Only file headers are read here (pure; no GPU), by kern-weights' one header reader
(:func:`kern_weights.stfile.read_header`), which keeps each tensor's absolute file offsets:
upload streams byte ranges straight from the file into pinned staging memory.

Rules: every weight buffer is bound by its exact name to exactly one tensor across the files
(missing and ambiguous names are errors); dtype and shape must match exactly (shape at the
symbol maxima, the allocation size). Every problem is collected and raised at once.
Tensors the manifest does not name are ignored (counted in the summary).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kern_manifest import DTYPE_SIZES, VerifiedManifest, shape_at
from kern_weights import stfile
from kern_weights.arrays import ST_NAMES
from kern_weights.errors import HeaderError
from kern_weights.stfile import TensorEntry

from . import errors
from .errors import WeightArtifactError

#: safetensors dtype name -> manifest dtype.
SAFETENSORS_DTYPES: dict[str, str] = {st: d for d, st in ST_NAMES.items()}

__all__ = ["SAFETENSORS_DTYPES", "TensorEntry", "UploadChunk", "WeightBinding", "bind_weights",
           "read_header", "upload_chunks"]


@dataclass(frozen=True, slots=True)
class WeightBinding:
    buffer: str
    entry: TensorEntry


def read_header(path: str | os.PathLike) -> dict[str, TensorEntry]:
    """Tensor entries of one safetensors file; raises :class:`WeightArtifactError` naming
    the file (and every bad entry) if it is unreadable or malformed."""
    try:
        return stfile.read_header(path)
    except HeaderError as err:
        raise WeightArtifactError(err.message, where=f"weight file `{err.path}`", help=err.help,
                                  problems=err.problems) from None


def bind_weights(vm: VerifiedManifest, files: Sequence[str | os.PathLike]
                 ) -> tuple[list[WeightBinding], int]:
    """Bind every ``weight`` buffer of ``vm`` to a tensor in ``files``.

    Returns the bindings (in manifest order) and the number of tensors in the files that the
    manifest does not use. Raises one :class:`WeightArtifactError` listing every problem.
    """
    headers = [read_header(f) for f in files]
    index: dict[str, list[TensorEntry]] = {}
    for h in headers:
        for name, e in h.items():
            index.setdefault(name, []).append(e)
    problems: list[str] = []
    out: list[WeightBinding] = []
    used: set[str] = set()
    for name, b in vm.manifest.buffers.items():
        if b.cls != "weight":
            continue
        found = index.get(name, [])
        want_shape = shape_at(b.shape, vm.sym_max)
        if not found:
            problems.append(f"{errors.weight(name)}: not found in any weight file "
                            f"(expected {b.dtype}{list(want_shape)})")
            continue
        if len(found) > 1:
            where = ", ".join(f"`{Path(e.file).name}`" for e in found)
            problems.append(f"{errors.weight(name)}: ambiguous, present in {where}")
            continue
        e = found[0]
        used.add(name)
        have = SAFETENSORS_DTYPES.get(e.dtype, e.dtype)
        if have != b.dtype:
            problems.append(f"{errors.weight(name)}: dtype is {e.dtype} in `{Path(e.file).name}`, "
                            f"the manifest declares {b.dtype}")
        elif e.shape != want_shape:
            problems.append(f"{errors.weight(name)}: shape is {list(e.shape)} in "
                            f"`{Path(e.file).name}`, the manifest declares {list(want_shape)}")
        else:
            assert e.nbytes == DTYPE_SIZES[b.dtype] * _prod(want_shape)
            out.append(WeightBinding(name, e))
    if problems:
        n = len(problems)
        raise WeightArtifactError(
            f"{n} weight problem{'s' if n > 1 else ''}", where="weights", problems=problems,
            help="the weight files must provide every `weight` buffer by name, with the "
                 "manifest's dtype and shape")
    unused = sum(1 for name in index if name not in used)
    return out, unused


def _prod(xs: Sequence[int]) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


@dataclass(frozen=True, slots=True)
class UploadChunk:
    """Copy ``nbytes`` from ``file`` at ``file_offset`` to buffer ``buffer`` at ``dst_offset``."""

    file: str
    file_offset: int
    nbytes: int
    buffer: str
    dst_offset: int


def upload_chunks(bindings: Sequence[WeightBinding], chunk_bytes: int) -> Iterator[UploadChunk]:
    """Split the bound tensors into copies of at most ``chunk_bytes``, file by file in file
    order (sequential reads), so that upload needs only ``chunk_bytes`` of staging memory
    per in-flight chunk and never a second full copy of the weights on the host."""
    if chunk_bytes < 1:
        raise ValueError("chunk_bytes must be positive")
    by_file: dict[str, list[WeightBinding]] = {}
    for b in bindings:
        by_file.setdefault(b.entry.file, []).append(b)
    for file, bs in by_file.items():
        for b in sorted(bs, key=lambda x: x.entry.start):
            done = 0
            while done < b.entry.nbytes:
                n = min(chunk_bytes, b.entry.nbytes - done)
                yield UploadChunk(file, b.entry.start + done, n, b.buffer, done)
                done += n
