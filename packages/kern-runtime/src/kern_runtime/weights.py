"""Weight binding: match the manifest's ``weight`` buffers to tensors in safetensors files.

Only file headers are read here (pure; no GPU). A safetensors file is
``u64-le header length N | N bytes of JSON header | data``; the header maps tensor names to
``{"dtype", "shape", "data_offsets": [begin, end]}`` with offsets relative to the data
section, plus an optional ``__metadata__`` entry. The header is parsed directly (rather
than through ``safetensors.safe_open``) because upload streams byte ranges straight from the
file into pinned staging memory, so the absolute file offsets are needed.

Rules: every weight buffer is bound by its exact name to exactly one tensor across the files
(missing and ambiguous names are errors); dtype and shape must match exactly (shape at the
symbol maxima, the allocation size). Every problem is collected and raised at once.
Tensors the manifest does not name are ignored (counted in the summary).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kern_manifest import DTYPE_SIZES, VerifiedManifest, shape_at

from . import errors
from .errors import WeightArtifactError

#: safetensors dtype name -> manifest dtype.
SAFETENSORS_DTYPES: dict[str, str] = {
    "BF16": "bf16", "F16": "f16", "F32": "f32", "F8_E4M3": "fp8e4m3",
    "I32": "i32", "U32": "u32", "I64": "i64", "U8": "u8",
}
#: Element sizes of safetensors dtypes, including ones the manifest has no name for.
_ST_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2,
             "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}

_MAX_HEADER = 100 * 2**20  # the format's own limit


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """One tensor in a safetensors file. ``start`` is the absolute file offset of its data."""

    file: str
    name: str
    dtype: str          # safetensors dtype name, e.g. "BF16"
    shape: tuple[int, ...]
    start: int
    nbytes: int


@dataclass(frozen=True, slots=True)
class WeightBinding:
    buffer: str
    entry: TensorEntry


def read_header(path: str | os.PathLike) -> dict[str, TensorEntry]:
    """Tensor entries of one safetensors file; raises :class:`WeightArtifactError` naming
    the file if it is unreadable or malformed."""
    p = str(path)
    where = f"weight file `{p}`"
    try:
        size = os.path.getsize(p)
        with open(p, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise WeightArtifactError("file is shorter than a safetensors header", where=where)
            (n,) = struct.unpack("<Q", head)
            if n > _MAX_HEADER or 8 + n > size:
                raise WeightArtifactError(f"header length {n} does not fit the file ({size} bytes)",
                                          where=where, help="is this a safetensors file?")
            raw = f.read(n)
    except OSError as err:
        raise WeightArtifactError(f"cannot read: {err.strerror or err}", where=where) from None
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WeightArtifactError(f"header is not valid JSON: {err}", where=where) from None
    if not isinstance(doc, dict):
        raise WeightArtifactError("header is not a JSON object", where=where)
    data_start = 8 + n
    out: dict[str, TensorEntry] = {}
    problems: list[str] = []
    for name, info in doc.items():
        if name == "__metadata__":
            continue
        try:
            dtype = info["dtype"]
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            problems.append(f"tensor `{name}`: malformed header entry {info!r}")
            continue
        elems = 1
        for d in shape:
            elems *= d
        esize = _ST_SIZES.get(dtype)
        if esize is None:
            problems.append(f"tensor `{name}`: unknown dtype {dtype!r}")
            continue
        if not 0 <= begin <= end or data_start + end > size or end - begin != elems * esize:
            problems.append(f"tensor `{name}`: data_offsets [{begin}, {end}] do not match "
                            f"{dtype}{list(shape)} inside a {size}-byte file")
            continue
        out[name] = TensorEntry(p, name, dtype, shape, data_start + begin, end - begin)
    if problems:
        raise WeightArtifactError("malformed safetensors header", where=where, problems=problems)
    return out


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
