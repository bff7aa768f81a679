"""Pass 4: buffer and scratch shapes resolve, byte sizes fit 64 bits, domains are consistent."""

from __future__ import annotations

from msgspec import UNSET

from .. import paths
from ..dtypes import INT_RANGES
from ..expr import ExprError
from ..schema import Buffer, Scratch
from ..sizes import fits_u64, nbytes
from .context import Context


def _check_shape(cx: Context, decl: Buffer | Scratch, path: str, what: str) -> bool:
    err = cx.sink.error
    ok = True
    if not decl.shape:
        err("E0201", f"{what} has an empty shape", f"{path}.shape",
            help="a scalar is shape [1]")
        return False
    for i, d in enumerate(decl.shape):
        if isinstance(d, str):
            if d not in cx.m.symbols:
                err("E0202", f"{what} dimension {i} names unknown symbol `{d}`",
                    f"{path}.shape[{i}]")
                ok = False
        elif d < 1:
            err("E0201", f"{what} dimension {i} is {d}; dimensions must be positive",
                f"{path}.shape[{i}]")
            ok = False
    if ok:
        try:
            nbytes(decl, cx.hi)
        except ExprError:
            err("E0203", f"{what} is larger than 2^64-1 bytes at the symbol maxima", path)
            ok = False
    return ok


def _check_domain(cx: Context, name: str, buf: Buffer, path: str) -> None:
    dom, err = buf.domain, cx.sink.error
    p = f"{path}.domain"
    if dom.index_into is not UNSET:
        target = dom.index_into
        if target not in cx.m.buffers and target not in cx.m.states:
            err("E0204", f"domain of `{name}` indexes into `{target}`, which is neither a "
                "buffer nor a state", f"{p}.index_into")
        if buf.dtype not in INT_RANGES:
            err("E0204", f"domain of `{name}` uses `index_into` but its dtype {buf.dtype} "
                "is not an integer type", f"{p}.index_into")
        if dom.min is not UNSET or dom.max is not UNSET:
            err("E0204", f"domain of `{name}` sets both `index_into` and `min`/`max`; they "
                "are exclusive", p)
    if dom.unit < 1:
        err("E0204", f"domain of `{name}` has unit {dom.unit}; it must be at least 1",
            f"{p}.unit")
    elif not fits_u64(dom.unit):
        err("E0204", f"domain of `{name}` has unit {dom.unit}, above 2^64-1", f"{p}.unit")
    if dom.monotone and len(buf.shape) != 1:
        err("E0204", f"domain of `{name}` is monotone but the buffer is "
            f"{len(buf.shape)}-D; `monotone` is only for 1-D buffers", f"{p}.monotone")
    bounds = {}
    for key in ("min", "max"):
        v = getattr(dom, key)
        if v is UNSET:
            continue
        if isinstance(v, (int, float)):
            bounds[key] = (v, v)
        else:
            got = cx.eval_corners(v, f"{p}.{key}", f"domain {key} of `{name}`")
            if got is not None:
                bounds[key] = got
    if "min" in bounds and "max" in bounds and bounds["min"][0] > bounds["max"][0]:
        err("E0204", f"domain of `{name}` has min {bounds['min'][0]} above max "
            f"{bounds['max'][0]}", p)


def check_buffers(cx: Context) -> None:
    for name, buf in cx.m.buffers.items():
        path = paths.key("buffers", name)
        _check_shape(cx, buf, path, f"buffer `{name}`")
        if buf.domain is not UNSET:
            _check_domain(cx, name, buf, path)
    for kname, k in cx.m.kernels.items():
        for sname, sc in k.impl.scratch.items():
            path = paths.key(f"{paths.key('kernels', kname)}.impl.scratch", sname)
            _check_shape(cx, sc, path, f"scratch `{sname}` of kernel `{kname}`")
