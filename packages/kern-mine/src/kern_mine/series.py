"""What a call site showed per forward: its fittable series and its pointer slots.

Contract:

* Series of a site: ``grid.x``, ``grid.y``, ``grid.z``, ``smem`` and ``param[i]`` for every
  parameter ``i`` whose size is 1, 2, 4 or 8 and that carries no pointer annotation in any
  of the site's launches (a scalar; read as an unsigned little-endian integer).  Values are
  per forward of the group, None where the forward lacks the site.
* Pointer slots of a site: every ``(param, at)`` that carries a pointer annotation in at least
  one launch (a flat pointer has ``at == 0``; a by-value struct has several).  Per forward
  the slot shows ``(range_start, range_size, offset)`` or None (not a device address there).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from .capture_format import Launch

__all__ = ["Series", "PtrSlot", "site_series", "site_pointer_slots"]

_SCALAR_SIZES = (1, 2, 4, 8)


class Series(msgspec.Struct):
    name: str
    values: list[int | None]

    @property
    def varies(self) -> bool:
        return len({v for v in self.values if v is not None}) > 1


class PtrSlot(msgspec.Struct):
    param: int
    at: int
    values: list[tuple[int, int, int] | None]
    """Per forward: (range_start, range_size, offset), or None."""


def site_series(launches: Sequence[Launch | None]) -> list[Series]:
    """The fittable series of one site (see the module docstring)."""
    present = [x for x in launches if x is not None]
    out = [
        Series("grid.x", [None if x is None else x.grid[0] for x in launches]),
        Series("grid.y", [None if x is None else x.grid[1] for x in launches]),
        Series("grid.z", [None if x is None else x.grid[2] for x in launches]),
        Series("smem", [None if x is None else x.smem for x in launches]),
    ]
    if not present or any(x.params is None for x in present):
        return out
    nparams = min(len(x.params or ()) for x in present)
    for i in range(nparams):
        ps = [x.params[i] for x in present]  # type: ignore[index]
        if any(p.ptrs for p in ps) or any(p.size not in _SCALAR_SIZES for p in ps):
            continue
        out.append(Series(f"param[{i}]", [None if x is None else x.params[i].as_int() for x in launches]))  # type: ignore[index]
    return out


def site_pointer_slots(launches: Sequence[Launch | None]) -> list[PtrSlot]:
    """The pointer slots of one site (see the module docstring)."""
    keys: dict[tuple[int, int], None] = {}
    for x in launches:
        if x is None or x.params is None:
            continue
        for i, p in enumerate(x.params):
            for q in p.ptrs:
                keys[(i, q.at)] = None
    slots = []
    for i, at in sorted(keys):
        vals: list[tuple[int, int, int] | None] = []
        for x in launches:
            v = None
            if x is not None and x.params is not None and i < len(x.params):
                for q in x.params[i].ptrs:
                    if q.at == at:
                        v = (q.range_start, q.range_size, q.offset)
                        break
            vals.append(v)
        slots.append(PtrSlot(i, at, vals))
    return slots
