"""What the capture, kern-mine's result and the provider sidecar say, per call site.

Contract: :func:`load` reads the three inputs once; :class:`Site` is one mined call site of
one group (template) with

- ``ptrs``: ``{(param, at): address}`` in the group's first forward (kern-mine's pointer
  facts), each also classified ``stable``/``changing``;
- ``scalars``: ``{param: SeriesFit}`` for every scalar parameter (constants and fitted
  expressions of ``tokens``), ``grid`` / ``smem`` fits;
- ``sizes``: the captured parameter layout (bytes per parameter, from ``cuFuncGetParamInfo``
  of the example launch) -- the ABI a replay must declare;
- ``kind``/``name`` of every pointer against the sidecar (``weight``/``cache`` tensors,
  with an offset inside them), else ``None`` (an activation address).

Addresses come from one forward (kern-mine reports the first forward's) so that equal
addresses mean the same tensor *within* that forward; the wiring replays Inductor's buffer
plan from them.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kern_mine import Mined, decode_json, mine, read_capture
from kern_mine.capture_format import Capture
from kern_mine.results import GroupInfo, SeriesFit, SiteInfo

from .errors import WiringError


@dataclass
class Site:
    group: int
    info: SiteInfo
    sizes: list[int]
    ptrs: dict[tuple[int, int], int]
    klass: dict[tuple[int, int], str]
    scalars: dict[int, SeriesFit]
    fits: dict[str, SeriesFit]
    forward: int = -1
    """The pass (kern-mine ``passes`` index) whose addresses ``ptrs`` holds: the group's first."""

    @property
    def index(self) -> int:
        return self.info.index

    @property
    def name(self) -> str:
        return self.info.name or self.info.kernel

    @property
    def module(self) -> str | None:
        return self.info.module

    def flat_ptrs(self) -> list[tuple[int, int]]:
        """(param, address) of every pointer parameter of a flat site, in parameter order."""
        return sorted((p, a) for (p, at), a in self.ptrs.items() if at == 0)

    def where(self, program: str, role: str = "") -> str:
        r = f" ({role})" if role else ""
        return (f"{program}: site {self.index} (occurrence {self.info.occurrence}) "
                f"`{self.name}`{r}, group {self.group}, forward {self.forward}")


@dataclass
class Tensor:
    name: str
    ptr: int
    nbytes: int
    dtype: str
    shape: list[int]
    stride: list[int]


@dataclass
class Facts:
    capture: Capture
    mined: Mined
    sidecar: dict[str, Any]
    weights: dict[str, Tensor]
    cache: dict[str, Tensor]
    _starts: list[int] = field(default_factory=list)
    _tensors: list[tuple[str, Tensor]] = field(default_factory=list)

    def __post_init__(self) -> None:
        items = [("weight", t) for t in self.weights.values()] + \
                [("cache", t) for t in self.cache.values()]
        items.sort(key=lambda kt: kt[1].ptr)
        self._tensors = items
        self._starts = [t.ptr for _, t in items]

    def tensor_at(self, addr: int) -> tuple[str, Tensor, int] | None:
        """(kind, tensor, byte offset) of the sidecar tensor holding ``addr``."""
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0:
            kind, t = self._tensors[i]
            if addr < t.ptr + t.nbytes:
                return kind, t, addr - t.ptr
        return None

    def sites(self, group: int) -> list[Site]:
        g = self.group(group)
        by_seq = {ln.seq: ln for ln in self.capture.launches}
        out = []
        for s in g.sites:
            ln = by_seq.get(s.example_seq)
            sizes = [p.size for p in (ln.params or ())] if ln is not None else []
            ptrs = {(p.param, p.at): (p.range_start or 0) + (p.offset or 0) for p in s.pointers}
            klass = {(p.param, p.at): p.klass for p in s.pointers}
            scal, fits = {}, {}
            for f in s.fits:
                if f.what.startswith("param["):
                    scal[int(f.what[6:-1])] = f
                else:
                    fits[f.what] = f
            out.append(Site(group, s, sizes, ptrs, klass, scal, fits, g.forwards[0]))
        return out

    def sidecar_forward(self, pass_index: int) -> dict[str, Any] | None:
        """The measured sidecar forward whose window holds the middle of kern-mine's pass
        ``pass_index`` (a pass's first launches can precede the sidecar's timestamp by a few
        microseconds), or None (the pass lies in no measured forward); several such forwards
        are refused."""
        p = self.mined.passes[pass_index]
        mid = (p.t0_ns + p.t1_ns) // 2
        hit = [f for r in self.sidecar["requests"] for f in r["forwards"]
               if f["t0_ns"] <= mid <= f["t1_ns"]]
        if len(hit) > 1:
            raise WiringError(f"pass {pass_index}: {len(hit)} sidecar forwards contain its mid "
                              f"time; cannot tie it to a forward")
        return hit[0] if hit else None

    def group(self, group: int) -> GroupInfo:
        for g in self.mined.groups:
            if g.index == group:
                return g
        raise WiringError(f"kern-mine found no group {group} in {self.mined.capture}")


def _tensors(entries: list[dict[str, Any]], prefix: str = "") -> dict[str, Tensor]:
    return {prefix + e["name"]: Tensor(prefix + e["name"], int(e["data_ptr"]), int(e["bytes"]),
                                       str(e["dtype"]), list(e["shape"]), list(e["stride"]))
            for e in entries}


def load(capture_dir: Path, mined_json: Path | None = None,
         sidecar: Path | None = None) -> Facts:
    cap = read_capture(capture_dir)
    mined = decode_json(Path(mined_json).read_bytes()) if mined_json else mine(cap)
    sc_path = Path(sidecar) if sidecar else Path(capture_dir) / "provider-sidecar.json"
    sc = json.loads(sc_path.read_text())
    if sc.get("format") != "kern-provider-sidecar":
        raise WiringError(f"{sc_path}: not a provider sidecar (format {sc.get('format')!r})")
    return Facts(cap, mined, sc, _tensors(sc["weights"]), _tensors(sc["cache"]["tensors"]))
