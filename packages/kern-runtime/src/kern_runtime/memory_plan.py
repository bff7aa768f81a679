"""Memory plan: where every buffer, state and scratch area lives inside one device arena.

Sizes (bytes):
- a buffer at its symbol maxima (``nbytes(buffer, sym_max)``), whatever its class;
- a state at ``bytes_per_token × capacity`` (or ``bytes_fixed``);
- a kernel's scratch area at the symbol maxima, one per (kernel, scratch name): scratch is
  private to one impl and dead outside one dispatch, but areas are not shared between
  kernels, so a fault in one impl cannot corrupt another's intermediate data.

Every region starts at a multiple of 256 bytes (the alignment the source engines' kernels
were built against) or of its state's ``align`` when that is larger; the arena base is
aligned to the largest of these by the backend (``MemoryPlan.align``). Weights come first
(the bulk, uploaded once), then states, then the other buffers, then scratch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from kern_manifest import VerifiedManifest, nbytes, state_bytes

from .errors import CallerError

#: Minimum alignment of every region, in bytes.
REGION_ALIGN = 256

#: Order in which buffer classes are laid out, after the weights.
_CLASS_ORDER = ("weight", "input", "carry", "workspace", "output")


def align_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


@dataclass(frozen=True, slots=True)
class Region:
    """One named area of the arena. ``cls`` is the buffer class, ``"state"`` or ``"scratch"``."""

    kind: Literal["buffer", "state", "scratch"]
    name: str
    cls: str
    offset: int
    nbytes: int
    kernel: str | None = None  # owning kernel, for scratch

    @property
    def label(self) -> str:
        return f"{self.kernel}/{self.name}" if self.kernel else self.name


@dataclass(frozen=True)
class MemoryPlan:
    buffers: dict[str, Region]
    states: dict[str, Region]
    scratch: dict[tuple[str, str], Region]
    #: Bytes the arena must provide from its aligned base.
    total: int
    #: Alignment the arena base needs.
    align: int
    capacity: int | None
    _order: list[Region] = field(default_factory=list, repr=False)

    def regions(self) -> list[Region]:
        """Every region in arena order."""
        return list(self._order)

    def class_totals(self) -> dict[str, tuple[int, int]]:
        """(count, bytes) per buffer class, plus ``state`` and ``scratch``."""
        out: dict[str, tuple[int, int]] = {}
        for r in self._order:
            n, b = out.get(r.cls, (0, 0))
            out[r.cls] = (n + 1, b + r.nbytes)
        return out

    def addresses(self, base: int) -> "Addresses":
        """Absolute device addresses given the arena's aligned base."""
        if base % self.align:
            raise ValueError(f"arena base {base:#x} is not {self.align}-byte aligned")
        return Addresses(
            buffers={n: base + r.offset for n, r in self.buffers.items()},
            states={n: base + r.offset for n, r in self.states.items()},
            scratch={k: base + r.offset for k, r in self.scratch.items()},
        )


@dataclass(frozen=True)
class Addresses:
    """Device address of every buffer, state and (kernel, scratch) area."""

    buffers: Mapping[str, int]
    states: Mapping[str, int]
    scratch: Mapping[tuple[str, str], int]


def plan_memory(vm: VerifiedManifest, capacity: int | None) -> MemoryPlan:
    """Lay out the arena for ``vm`` with states sized for ``capacity`` tokens.

    Raises :class:`CallerError` if a per-token state exists and ``capacity`` is missing or
    not a positive integer.
    """
    m = vm.manifest
    needs_capacity = any(s.bytes_per_token and not s.bytes_fixed for s in m.states.values())
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int)
                                 or capacity < 1):
        raise CallerError(f"capacity must be a positive integer, got {capacity!r}")
    if needs_capacity and capacity is None:
        names = ", ".join(f"`{n}`" for n, s in m.states.items() if s.bytes_per_token)
        raise CallerError("the manifest has per-token states but no capacity was given",
                          where=f"states {names}",
                          help="pass capacity=<max tokens the states must hold> to Runtime.load")
    order: list[Region] = []
    offset = 0
    max_align = REGION_ALIGN

    def place(kind, name, cls, size, align=REGION_ALIGN, kernel=None) -> Region:
        nonlocal offset, max_align
        a = max(align, REGION_ALIGN)
        max_align = max(max_align, a)
        offset = align_up(offset, a)
        r = Region(kind, name, cls, offset, size, kernel)
        order.append(r)
        offset += size
        return r

    buffers: dict[str, Region] = {}
    # weights first, then states, then the other classes in a fixed order
    for name, b in m.buffers.items():
        if b.cls == "weight":
            buffers[name] = place("buffer", name, "weight", nbytes(b, vm.sym_max))
    states: dict[str, Region] = {}
    for name, s in m.states.items():
        size = state_bytes(s.bytes_per_token, s.bytes_fixed, capacity or 0)
        states[name] = place("state", name, "state", size, align=s.align)
    for cls in _CLASS_ORDER[1:]:
        for name, b in m.buffers.items():
            if b.cls == cls:
                buffers[name] = place("buffer", name, cls, nbytes(b, vm.sym_max))
    scratch: dict[tuple[str, str], Region] = {}
    for kname, k in m.kernels.items():
        for sname, sc in k.impl.scratch.items():
            scratch[(kname, sname)] = place("scratch", sname, "scratch",
                                            nbytes(sc, vm.sym_max), kernel=kname)
    total = align_up(offset, REGION_ALIGN)
    return MemoryPlan(buffers, states, scratch, total, max_align, capacity, order)
