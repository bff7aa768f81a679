"""Host arrays for ``Runtime.write`` / ``Runtime.read`` (pure numpy; no GPU).

numpy has no bf16 or fp8 type, so those buffers travel as raw bits: ``read`` returns
``uint16`` for bf16 and ``uint8`` for fp8e4m3, and ``write`` accepts those (or ml_dtypes'
``bfloat16`` / ``float8_e4m3fn`` when the caller has them). :func:`to_bf16` and
:func:`from_bf16` convert between float32 and bf16 bits (round to nearest even); they, and
the host dtype of each manifest dtype, are kern-weights' (:mod:`kern_weights.arrays`).

A write may be a prefix: its elements are written from the start of the buffer (row-major,
so a prefix of rows), as long as they fit the buffer at its symbol maxima.
"""

from __future__ import annotations

import math
from functools import lru_cache
from collections.abc import Mapping

import numpy as np
from kern_manifest import DTYPE_SIZES, Buffer, shape_at
from kern_manifest.schema import Domain
from msgspec import UNSET
from kern_weights.arrays import STORAGE, from_bf16, to_bf16

from .errors import CallerError

__all__ = ["HOST_DTYPES", "from_bf16", "host_view", "row_offset", "to_bf16"]

#: Host dtype ``read`` returns for each manifest dtype (its numpy storage).
HOST_DTYPES: dict[str, np.dtype] = {d: STORAGE[d] for d in DTYPE_SIZES}

#: Further host dtype names ``write`` accepts (same element size, raw bits or the real type).
_ALSO_ACCEPTED: dict[str, tuple[str, ...]] = {
    "bf16": ("int16", "bfloat16"),
    "fp8e4m3": ("int8", "float8_e4m3fn"),
}


def host_view(name: str, buf: Buffer, array: object, max_values: Mapping[str, int],
              capacity: int | None = None) -> np.ndarray:
    """Check ``array`` against buffer ``name`` and return it as a C-contiguous 1-D byte view.

    Refuses (with :class:`CallerError`) a dtype other than the buffer's (no silent casts:
    float64 for an f32 buffer is refused), and more elements than the buffer holds at the
    symbol maxima. If ``array`` has the buffer's rank, every constant dimension must match.
    Every element must lie in the buffer's ``domain`` (:func:`check_domain`; ``capacity``:
    the states' token slots).
    """
    if not isinstance(array, np.ndarray):
        raise CallerError(f"write needs a numpy array, got {type(array).__name__}",
                          where=f"buffer `{name}`")
    want = HOST_DTYPES[buf.dtype]
    ok = array.dtype == want or (array.dtype.itemsize == want.itemsize
                                 and array.dtype.name in _ALSO_ACCEPTED.get(buf.dtype, ()))
    if not ok:
        raise CallerError(f"array dtype {array.dtype} does not match the buffer's {buf.dtype}",
                          where=f"buffer `{name}`",
                          help=f"pass {want} (bf16 and fp8 travel as raw bits; see to_bf16)")
    cap_shape = shape_at(buf.shape, max_values)
    if array.ndim == len(buf.shape):
        for i, (d, have) in enumerate(zip(buf.shape, array.shape)):
            if isinstance(d, int) and have != d:
                raise CallerError(f"array shape {list(array.shape)} differs from the buffer's "
                                  f"{list(buf.shape)} in dimension {i}", where=f"buffer `{name}`")
    cap = math.prod(cap_shape)  # exact, and ~50x cheaper than np.prod on a short tuple
    if array.size > cap:
        raise CallerError(f"{array.size} elements do not fit: the buffer holds {cap} "
                          f"({buf.dtype}{list(cap_shape)} at the symbol maxima)",
                          where=f"buffer `{name}`")
    flat = np.ascontiguousarray(array).reshape(-1)
    if buf.domain is not UNSET and flat.size:
        check_domain(name, buf.domain, flat, capacity)
    return flat.view(np.uint8)


@lru_cache(maxsize=256)
def domain_bounds(dom: Domain, capacity: int | None) -> tuple[int | None, int | None]:
    """(lowest, highest) value ``dom`` admits at ``capacity`` (None: unbounded), computed once
    per (domain, capacity): constant ``min`` / ``max`` (inclusive) or, for ``index_into`` a
    state, ``(value + 1) x unit <= capacity`` token slots."""
    if dom.index_into is not UNSET and capacity is not None:
        return 0, capacity // dom.unit - 1
    return (dom.min if isinstance(dom.min, int) else None,
            dom.max if isinstance(dom.max, int) else None)


def check_domain(name: str, dom: Domain, flat: np.ndarray, capacity: int | None) -> None:
    """Every element within the buffer's declared ``domain`` (:func:`domain_bounds`; an
    index into a buffer is checked by the verifier's bounds, not here). Refuses the write
    before anything is queued, naming the first offending element. Per write (a decode step
    writes two one-element inputs): the smallest and largest element, the mask only on
    refusal."""
    lo, hi = domain_bounds(dom, capacity)
    if flat.size <= 16:                  # Python beats numpy's reductions on a few elements
        vals = flat.tolist()
        mn, mx = min(vals), max(vals)
    else:
        mn, mx = flat.min(), flat.max()
    low = lo is not None and mn < lo
    if not low and (hi is None or mx <= hi):
        return
    bad = flat < lo if low else flat > hi
    i = int(np.argmax(bad))
    what = (f"the {capacity} token slots of state `{dom.index_into}`"
            if dom.index_into is not UNSET else f"its domain [{lo}, {hi}]")
    raise CallerError(f"element {i} is {flat[i].item()}, outside {what}",
                      where=f"buffer `{name}`",
                      help="positions must lie below the capacity and the model's "
                           "position limit")


def row_offset(where: str, buf: Buffer, row: int, max_values: Mapping[str, int]) -> int:
    """Byte offset of row ``row`` of ``buf`` (a row: its shape without the leading dimension,
    which must be a symbol; the rest at ``max_values``), e.g. where ``Runtime.copy`` lands."""
    if row == 0:
        return 0
    if row < 0 or not buf.shape or not isinstance(buf.shape[0], str):
        raise CallerError(f"{where} at row {row}: rows count from 0 along a leading symbol "
                          f"dimension (shape {list(buf.shape)})")
    rest = shape_at(buf.shape[1:], max_values)
    return row * math.prod(rest) * DTYPE_SIZES[buf.dtype]
