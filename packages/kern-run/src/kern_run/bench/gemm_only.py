"""The GEMMs of one program, alone: a manifest holding only the dispatches of ``program``
whose kernels are GEMMs (cuBLASLt externs, or kern-gen's kernels named ``gemm…`` or
``<program>.gemm.<n>x<k>``, whichever implementation they have: ``kern-gen --gemm``, and its
fused GEMVs ``<program>.gemm_silu.…`` / ``<program>.gemm_split.…`` and
those of ``kern-gen --fuse-norm`` (``<program>.gemm_norm.…``, ``.gemm_rnorm[_silu].…``,
``.gemm_res.…``), whose time includes the RMSNorms split between them), with
the same weights, so that ``kern-run bench`` can time
"the same step's GEMMs" through the same runtime path as the whole step.

Buffers the GEMMs read before any GEMM writes them (activations made by other kernels)
become ``input`` (their contents do not change a GEMM's time); buffers a GEMM accumulates
into before a plain GEMM wrote them become ``carry``; weights stay ``weight`` (bound from the
same safetensors file); everything else the GEMMs do not touch is dropped."""

from __future__ import annotations

import json
from typing import Any

from kern_manifest import Manifest, encode, parse_param_type

from ..errors import KernRunError

GEMM_NAMES = ("gemm", "gemm_silu", "gemm_split", "gemm_norm", "gemm_rnorm", "gemm_rnorm_silu",
              "gemm_res")
"""The middle part of kern-gen's few-row GEMM kernel names (``decode.gemm_silu.1536x576``)."""


def gemm_only(m: Manifest, program: str = "decode", name: str = "gemms") -> dict[str, Any]:
    """The GEMM-only manifest (as a JSON object) of ``program``; its program is ``name``."""
    if program not in m.programs:
        raise KernRunError(f"manifest `{m.meta.model}` has no program `{program}`")
    doc = json.loads(encode(m))
    gemm_kernels = {k for k, kern in m.kernels.items()
                    if all(s.is_extern for s in kern.impl.steps) or k.startswith("gemm")
                    or any(f".{g}." in k for g in GEMM_NAMES)}
    dispatches = [(i, d) for i, d in enumerate(m.programs[program].dispatches)
                  if d.kernel in gemm_kernels]
    if not dispatches:
        raise KernRunError(f"program `{program}` of `{m.meta.model}` has no GEMM dispatches")
    written: set[str] = set()
    cls: dict[str, str] = {}
    symbols: set[str] = set()
    for _, d in dispatches:
        params = m.kernels[d.kernel].params
        for p, a in zip(params, d.args):
            if a.kind == "sym":
                symbols.add(a.sym)  # type: ignore[arg-type]
            if a.kind != "buf":
                continue
            b = a.buf
            orig = m.buffers[b].cls  # type: ignore[index]
            t = parse_param_type(p)
            if orig == "weight":
                cls[b] = "weight"  # type: ignore[index]
                continue
            if t.reads and b not in written:
                cls.setdefault(b, "input" if t.direction == "in" else "carry")  # type: ignore[arg-type]
            if t.direction in ("out", "inout"):
                if cls.get(b) == "input":  # type: ignore[arg-type]
                    cls[b] = "carry"  # type: ignore[index]
                cls.setdefault(b, "workspace")  # type: ignore[arg-type]
                written.add(b)  # type: ignore[arg-type]
    for b, buf in m.buffers.items():
        if b in cls:
            for dim in buf.shape:
                if isinstance(dim, str):
                    symbols.add(dim)
    buffers = {}
    for b, c in cls.items():
        entry = dict(doc["buffers"][b])
        entry["class"] = c
        entry.pop("domain", None)
        buffers[b] = entry
    kept = {d.kernel for _, d in dispatches}
    return {
        "meta": {"version": doc["meta"]["version"], "model": f"{m.meta.model} ({program} GEMMs)"},
        "symbols": {s: doc["symbols"][s] for s in sorted(symbols) if s in doc["symbols"]},
        "buffers": buffers,
        "kernels": {k: doc["kernels"][k] for k in sorted(kept)},
        "programs": {name: {"dispatches": [doc["programs"][program]["dispatches"][i]
                                           for i, _ in dispatches]}},
    }


def decode_symbols(doc: dict[str, Any]) -> dict[str, int]:
    """The symbols of a GEMM-only manifest made from ``decode``, at one token: every symbol it
    declares (a manifest whose decode shapes are all fixed declares none) set to 1."""
    return {s: 1 for s in doc.get("symbols", {})}
