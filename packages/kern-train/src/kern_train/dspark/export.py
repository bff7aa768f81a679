"""Writes a draft as the contract's two files (docs/dspark.md, "Files"): ``draft.safetensors``
(bf16, exactly :func:`~.config.weight_shapes`' names and shapes, in that order; ``fc`` split
into 5 ``[d, d]`` blocks; qkv and gate/up already merged in the model; no embedding or lm_head)
and ``dspark.json``.

:func:`write_weights` is numpy only (the ``random`` sub-command uses it without torch);
:func:`draft_arrays` maps a torch :class:`~.model.Draft` onto the names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from kern_weights import SafetensorsWriter, Slot, f32_to_bf16

from .config import TAPS, DraftConfig, DSparkError, Geometry, weight_shapes, write_config

WEIGHTS = "draft.safetensors"
CONFIG = "dspark.json"
#: The shipped example's weight file limit (issue 15): 32 MB.
MAX_BYTES = 32_000_000


def write_weights(path: str | os.PathLike, g: Geometry, cfg: DraftConfig,
                  arrays: Mapping[str, np.ndarray], max_bytes: int | None = None) -> int:
    """Write ``arrays`` (float32, any order) as bf16 in the contract's order; refuses a
    missing, extra or mis-shaped tensor and a file over ``max_bytes``. Returns the file size."""
    shapes = weight_shapes(g, cfg.layers, cfg.markov_rank)
    missing = [n for n in shapes if n not in arrays]
    extra = [n for n in arrays if n not in shapes]
    if missing or extra:
        raise DSparkError(f"{path}: tensors missing {missing[:3]} / not in the contract "
                          f"{extra[:3]}")
    for n, shape in shapes.items():
        if tuple(arrays[n].shape) != shape:
            raise DSparkError(f"{path}: `{n}`: shape {list(arrays[n].shape)}, the contract "
                              f"says {list(shape)}")
    slots = [Slot(n, "bf16", s) for n, s in shapes.items()]
    size = sum(s.nbytes for s in slots)
    if max_bytes is not None and size > max_bytes:
        raise DSparkError(f"{path}: {size} bytes of weights exceed the limit of {max_bytes} "
                          f"(fewer layers or a smaller --markov-rank)")
    with SafetensorsWriter(path, slots, metadata={"format": "kern-dspark"}) as w:
        for n in shapes:
            w.write(n, f32_to_bf16(arrays[n]))
    return Path(path).stat().st_size


def draft_arrays(draft) -> dict[str, np.ndarray]:
    """The contract's tensors of a torch Draft, float32 numpy."""
    d = draft.g.hidden
    out: dict[str, np.ndarray] = {}
    for name, p in draft.state_dict().items():
        a = p.detach().float().cpu().numpy()
        if name == "fc.weight":       # [d, 5d] = [W_fc,0 | … | W_fc,4]
            for i in range(TAPS):
                out[f"draft.fc.{i}.weight"] = np.ascontiguousarray(a[:, i * d:(i + 1) * d])
        else:
            out["draft." + name] = a
    return out


def export(out_dir: str | os.PathLike, g: Geometry, cfg: DraftConfig,
           arrays: Mapping[str, np.ndarray], max_bytes: int | None = None) -> int:
    """Both files into ``out_dir`` (created); returns the weight file's size."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    size = write_weights(out / WEIGHTS, g, cfg, arrays, max_bytes)
    write_config(out / CONFIG, cfg)
    return size


def load_arrays(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The tensors of a ``draft.safetensors`` as float32 (bf16 widened exactly)."""
    from kern_weights import bf16_to_f32
    from kern_weights.stfile import read_header

    out = {}
    with open(path, "rb") as f:
        for name, e in read_header(path).items():
            if e.dtype != "BF16":
                raise DSparkError(f"{path}: `{name}`: dtype {e.dtype}, the contract says BF16")
            f.seek(e.start)
            bits = np.frombuffer(f.read(e.nbytes), dtype="<u2").reshape(e.shape)
            out[name] = bf16_to_f32(bits)
    return out
