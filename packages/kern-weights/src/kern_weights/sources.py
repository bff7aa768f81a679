"""Weight sources: where export reads tensors from, always under Hugging Face names.

A :class:`Source` knows every tensor's name, shape and dtype up front (from file headers;
no tensor data read) and loads one tensor at a time on request, so an export never holds
more than the tensor it is writing. ``config`` is the model's configuration under HF
``config.json`` keys (from ``config.json`` or translated from GGUF metadata); derived
tensors read their parameters from it.

Two sources: :class:`HFSource` (a checkpoint directory of ``*.safetensors``, sharded or
not) and :class:`~kern_weights.gguf_source.GGUFSource` (a GGUF file, dequantized).
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .arrays import STORAGE, Array
from .errors import ExportError, HeaderError
from .stfile import TensorEntry, read_header

@dataclass(frozen=True, slots=True)
class TensorInfo:
    """What a source knows about a tensor before loading it (``dtype`` as loaded)."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class Source(Protocol):
    #: Human-readable origin, used in error messages.
    where: str
    #: The model configuration under HF ``config.json`` keys (may be empty).
    config: Mapping[str, Any]

    def tensors(self) -> Mapping[str, TensorInfo]: ...

    def load(self, name: str) -> Array: ...


def missing(source: Source, name: str, also: str = "") -> str:
    """One-line error for a tensor the source lacks, with the closest names it has;
    ``also``: where else it was looked for (", nor in …")."""
    close = difflib.get_close_matches(name, list(source.tensors()), n=3, cutoff=0.6)
    hint = f"; closest: {', '.join(f'`{c}`' for c in close)}" if close else ""
    return f"source tensor `{name}` not found in {source.where}{also}{hint}"


# --- safetensors ----------------------------------------------------------------------


def read_safetensors_header(path: str | os.PathLike) -> dict[str, TensorEntry]:
    """Tensor entries of one safetensors file (:func:`.stfile.read_header`), every one of a
    dtype export reads; :class:`ExportError` naming the file, one line per problem, if it is
    unreadable or malformed."""
    try:
        entries = read_header(path)
    except HeaderError as err:
        if err.problems:
            raise ExportError(*(f"{err.where}: {p}" for p in err.problems)) from None
        hint = f"; {err.help}" if err.help else ""
        raise ExportError(f"{err.where}: {err.message}{hint}") from None
    unread = [f"`{e.file}`: tensor `{e.name}` has dtype {e.dtype}, which export does not read"
              for e in entries.values() if e.kern_dtype is None]
    if unread:
        raise ExportError(*unread)
    return entries


class HFSource:
    """A Hugging Face checkpoint directory: ``model.safetensors.index.json`` if present
    (its shards), else every ``*.safetensors`` file in it; ``config.json`` if present.

    bf16 tensors are read as raw bytes at their header offsets (numpy has no bf16, so
    ``safetensors``' numpy reader refuses them); other dtypes through
    ``safetensors.safe_open(framework="numpy")``.
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        d = Path(directory)
        self.where = f"HF checkpoint `{d}`"
        if not d.is_dir():
            raise ExportError(f"{self.where}: not a directory")
        index = d / "model.safetensors.index.json"
        if index.is_file():
            try:
                wm = json.loads(index.read_text())["weight_map"]
                files = sorted({d / f for f in wm.values()})
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
                raise ExportError(f"`{index}`: not a readable safetensors index ({err})") from None
        else:
            files = sorted(d.glob("*.safetensors"))
        if not files:
            raise ExportError(f"{self.where}: no *.safetensors files")
        self._entries: dict[str, TensorEntry] = {}
        for f in files:
            for name, e in read_safetensors_header(f).items():
                if name in self._entries:
                    raise ExportError(f"{self.where}: tensor `{name}` is in both "
                                      f"`{Path(self._entries[name].file).name}` and `{f.name}`")
                self._entries[name] = e
        self._infos = {n: TensorInfo(n, e.shape, e.kern_dtype)  # type: ignore[arg-type]
                       for n, e in self._entries.items()}
        self.config: dict[str, Any] = {}
        cfg = d / "config.json"
        if cfg.is_file():
            try:
                self.config = json.loads(cfg.read_text())
            except (OSError, ValueError) as err:
                raise ExportError(f"`{cfg}`: not readable JSON ({err})") from None
            if not isinstance(self.config, dict):
                raise ExportError(f"`{cfg}`: not a JSON object")

    def tensors(self) -> Mapping[str, TensorInfo]:
        return self._infos

    def load(self, name: str) -> Array:
        e = self._entries.get(name)
        if e is None:
            raise ExportError(missing(self, name))
        info = self._infos[name]
        try:
            if info.dtype in ("bf16", "fp8e4m3"):
                with open(e.file, "rb") as f:
                    f.seek(e.start)
                    buf = f.read(e.nbytes)
                if len(buf) != e.nbytes:
                    raise ExportError(f"`{e.file}`: tensor `{name}` is truncated")
                data = np.frombuffer(buf, dtype=STORAGE[info.dtype]).reshape(info.shape)
            else:
                from safetensors import safe_open

                with safe_open(e.file, framework="numpy") as f:
                    data = f.get_tensor(name)
                data = data.astype(STORAGE[info.dtype], copy=False)
        except OSError as err:
            raise ExportError(f"`{e.file}`: cannot read tensor `{name}`: "
                              f"{err.strerror or err}") from None
        except Exception as err:  # safetensors raises its own error types
            if isinstance(err, ExportError):
                raise
            raise ExportError(f"`{e.file}`: cannot read tensor `{name}`: {err}") from None
        return Array(data, info.dtype)


def open_source(*, hf: str | os.PathLike | None = None,
                gguf: str | os.PathLike | None = None) -> Source:
    """The source for exactly one of ``hf`` (a directory) or ``gguf`` (a file)."""
    if (hf is None) == (gguf is None):
        raise ExportError("give exactly one source: --hf DIR or --gguf FILE")
    if hf is not None:
        return HFSource(hf)
    from .gguf_source import GGUFSource

    return GGUFSource(gguf)  # type: ignore[arg-type]
