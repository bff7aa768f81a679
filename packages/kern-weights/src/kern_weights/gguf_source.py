"""A GGUF file as a weight source: tensors dequantized by the ``gguf`` package, named and
row-ordered as Hugging Face's (see :mod:`.gguf_map`); metadata by kern's own reader
(:mod:`.gguf`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import gguf_map
from .arrays import Array
from .errors import ExportError, GGUFError
from .gguf import read_metadata
from .sources import TensorInfo, missing

_CHUNK_ELEMENTS = 1 << 20


class GGUFSource:
    """Tensors of a GGUF file. F32/F16 tensors load as they are stored; BF16 and every
    quantized type load as float32 (``gguf.quants.dequantize``). q/k projections of
    :data:`~.gguf_map.PERMUTED_ARCHS` are un-permuted on load."""

    def __init__(self, path: str | os.PathLike) -> None:
        import gguf

        self.path = str(path)
        self.where = f"GGUF file `{self.path}`"
        if not os.path.isfile(self.path):
            raise ExportError(f"{self.where}: no such file")
        try:
            self._reader = gguf.GGUFReader(self.path)
        except Exception as err:  # the reader raises ValueError, struct.error, OSError, ...
            raise ExportError(f"{self.where}: not a readable GGUF file ({err})") from None
        try:
            # the tokenizer's keys are not needed here (and are the bulk of the metadata)
            meta = {k: v for k, v in read_metadata(self.path).items()
                    if not k.startswith("tokenizer.")}
        except GGUFError as err:
            raise ExportError(f"{self.where}: not a readable GGUF file ({err})") from None
        self.meta: dict[str, Any] = meta
        self.arch = str(meta.get("general.architecture", ""))
        gguf_names = {t.name for t in self._reader.tensors}
        self.config: dict[str, Any] = gguf_map.hf_config(self.arch, meta, gguf_names)
        self._by_name: dict[str, Any] = {}
        self._infos: dict[str, TensorInfo] = {}
        for t in self._reader.tensors:
            name = gguf_map.hf_name(t.name) or t.name
            shape = tuple(int(d) for d in reversed(t.shape.tolist()))  # ggml lists dims inner-first
            kind = t.tensor_type.name
            dtype = {"F32": "f32", "F16": "f16"}.get(kind, "f32")
            self._by_name[name] = t
            self._infos[name] = TensorInfo(name, shape, dtype)
            heads = gguf_map.permuted_heads(t.name, self.arch, self.config)
            if heads is not None and (heads <= 0 or shape[0] % (2 * heads)):
                raise ExportError(f"{self.where}: `{t.name}` has {shape[0]} rows, which do not "
                                  f"split into {heads} heads of even size")

    def tensors(self) -> Mapping[str, TensorInfo]:
        return self._infos

    def gguf_name(self, name: str) -> str:
        return self._by_name[name].name

    def load_raw(self, name: str) -> np.ndarray:
        """The tensor as float (dequantized), in GGUF row order (no un-permutation)."""
        import gguf

        t = self._by_name.get(name)
        if t is None:
            raise ExportError(missing(self, name))
        info = self._infos[name]
        try:
            if t.tensor_type.name in ("F32", "F16"):
                data = np.asarray(t.data)
            elif t.data.ndim >= 2 and t.data.shape[0] > 1:
                # row blocks at a time: bounds the dequantizer's temporaries
                raw = t.data.reshape(t.data.shape[0], -1)
                data = np.empty((raw.shape[0], info.n_elements // raw.shape[0]), np.float32)
                step = max(1, _CHUNK_ELEMENTS // data.shape[1])
                for i in range(0, raw.shape[0], step):
                    data[i:i + step] = gguf.quants.dequantize(
                        raw[i:i + step], t.tensor_type).reshape(-1, data.shape[1])
            else:
                data = gguf.quants.dequantize(t.data, t.tensor_type)
        except Exception as err:
            raise ExportError(f"{self.where}: cannot dequantize `{t.name}` "
                              f"({t.tensor_type.name}): {err}") from None
        data = data.reshape(info.shape)
        want = np.float16 if info.dtype == "f16" else np.float32
        return data.astype(want, copy=False)

    def load(self, name: str) -> Array:
        data = self.load_raw(name)
        heads = gguf_map.permuted_heads(self._by_name[name].name, self.arch, self.config)
        if heads is not None:
            data = np.ascontiguousarray(gguf_map.unpermute(data, heads))
        return Array(data, self._infos[name].dtype)
