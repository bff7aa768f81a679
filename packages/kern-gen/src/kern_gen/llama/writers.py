"""The mined cache writers are capacity-free: asserted from their cubins and Inductor's code.

A writer stores element ``d`` of head ``h`` of row ``t`` at ``d + head_dim*h +
kv_heads*head_dim*slot[t]`` of a layer's K (V) cache (:mod:`.kv`), with Inductor's compiled
bounds check ``0 <= slot < L``.  Two facts make a manifest built from it valid for any
capacity up to ``L``, and both are checked here for every writer site:

1. **the bound**: the int32 literal ``L`` (the sidecar's cache length, the model's
   ``max_position_embeddings``) occurs in the writer's cubin;
2. **the store arithmetic**, read from Inductor's generated code for the captured process
   (``<capture>/inductor/inductor_code.log.xz``, ``TORCH_LOGS=output_code``; evidence the
   provider ships with the capture, like the sidecar): each cache store's index is a sum of
   terms whose only indirect (loaded) variable is the asserted slot, with coefficient
   ``kv_heads*head_dim`` (the sidecar's token stride), every other coefficient smaller
   (``d + head_dim*h``: nothing scales with ``L``), and the slot's ``device_assert`` bound is
   ``L``.

The log is matched to a site by kernel name and pointer count (Inductor reuses names across
graphs; every matching definition must agree).
"""

from __future__ import annotations

import lzma
import re
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .errors import WiringError
from .facts import Facts, Site
from .kv import KVLayout

LOG = Path("inductor") / "inductor_code.log.xz"
_LINE = re.compile(r"\[__output_code\] ?(.*)$")
_DEF = re.compile(r"def (triton_\w+)\((.*)\):")
_STORE = re.compile(r"tl\.store\((out_ptr\d+|in_out_ptr\d+) \+ \((.*)\), \w+")
_ASSERT = re.compile(r"tl\.device_assert\(.*?\(0 <= (tmp\d+)\) & \((tmp\d+) < (\d+)\)")
_TERM = re.compile(r"^(?:(\d+)\*)?(x\d+|y\d+|z\d+|r0_\d+|tmp\d+)$")


@dataclass(frozen=True)
class Kernel:
    name: str
    ptr_names: tuple[str, ...]   # pointer parameters in order (in_ptrN / out_ptrN / in_out_ptrN)
    body: tuple[str, ...]

    @property
    def pointers(self) -> int:
        return len(self.ptr_names)


@lru_cache(maxsize=4)
def _kernels(path: Path) -> dict[str, list[Kernel]]:
    out: dict[str, list[Kernel]] = {}
    cur: tuple[str, tuple[str, ...]] | None = None
    body: list[str] = []
    with lzma.open(path, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            m = _LINE.search(line.rstrip("\n"))
            if not m:
                continue
            text = m.group(1)
            d = _DEF.match(text)
            if d:
                ptrs = tuple(a.strip() for a in d.group(2).split(",")
                             if "ptr" in a.split(":")[0])
                cur, body = (d.group(1), ptrs), []
                continue
            if cur and text.startswith("'''"):
                out.setdefault(cur[0], []).append(Kernel(cur[0], cur[1], tuple(body)))
                cur = None
                continue
            if cur:
                body.append(text.strip())
    return out


def kernels_of(facts: Facts, site: Site) -> list[Kernel]:
    """Inductor's definitions of ``site``'s kernel (same name and pointer count) in the
    capture's code log; empty without a log."""
    path = Path(facts.capture.path) / LOG
    if not path.is_file():
        return []
    return [k for k in _kernels(path).get(site.name, []) if k.pointers == len(site.flat_ptrs())]


def directions(facts: Facts, site: Site, where: str) -> list[str]:
    """``in`` / ``out`` / ``inout`` of each pointer parameter of ``site``, from Inductor's
    parameter names (``in_ptrN``, ``out_ptrN``, ``in_out_ptrN``); every definition of the
    kernel in the log must agree."""
    _need_log(facts, where)
    found = kernels_of(facts, site)
    if not found:
        _fail(where, f"Inductor's code log ({LOG}) has no kernel `{site.name}` with "
                     f"{len(site.flat_ptrs())} pointer parameters")
    kinds = {tuple("inout" if n.startswith("in_out_ptr") else "out" if n.startswith("out_ptr")
                   else "in" for n in k.ptr_names) for k in found}
    if len(kinds) != 1:
        _fail(where, f"Inductor's definitions of `{site.name}` disagree on the pointer "
                     f"directions: {sorted(kinds)}")
    return list(kinds.pop())


def _need_log(facts: Facts, where: str) -> None:
    if not (Path(facts.capture.path) / LOG).is_file():
        _fail(where, f"the capture has no Inductor code log ({LOG}): the kernels' pointer "
                     f"directions and the writers' store arithmetic cannot be checked "
                     f"(capture/device_run.sh writes it)")


def _fail(where: str, fact: str) -> None:
    raise WiringError(f"{where}: {fact}")


def check_writer(facts: Facts, site: Site, kv: KVLayout, caches: int, where: str) -> None:
    """Assert facts 1 and 2 of the module doc for the writer ``site`` that stores into
    ``caches`` cache tensors (1: K or V; 2: the fused K and V write)."""
    data = facts.capture.module_bytes(site.module or "")
    if data is None:
        _fail(where, "no cubin in the capture to read the writer's bound from")
    if struct.pack("<i", kv.max_len) not in data:
        _fail(where, f"the writer's cubin has no int32 literal {kv.max_len} (the cache length "
                     f"L of the sidecar): its compiled bounds check is not 0 <= slot < L")
    _need_log(facts, where)
    found = kernels_of(facts, site)
    if not found:
        _fail(where, f"Inductor's code log has no kernel `{site.name}` with "
                     f"{len(site.flat_ptrs())} pointer parameters")
    for k in found:
        _check_body(k, kv, caches, where)


def _check_body(k: Kernel, kv: KVLayout, caches: int, where: str) -> None:
    bounds: dict[str, int] = {}
    for line in k.body:
        a = _ASSERT.search(line)
        if a and a.group(1) == a.group(2):
            bounds[a.group(1)] = int(a.group(3))
    stores = [m.groups() for m in map(_STORE.search, k.body) if m]
    if len(stores) != caches:
        _fail(where, f"Inductor's `{k.name}` has {len(stores)} stores; a writer of {caches} "
                     f"cache tensor(s) has {caches}")
    for ptr, index in stores:
        expr = re.sub(r"tl\.broadcast_to\((.*), \[.*\]\)$", r"\1", index.strip())
        slot, others = None, []
        for term in (t.strip() for t in expr.split("+")):
            m = _TERM.match(term)
            if not m:
                _fail(where, f"Inductor's `{k.name}` stores to {ptr} at `{expr}`: term "
                             f"`{term}` is not coefficient*variable")
            coef, var = int(m.group(1) or 1), m.group(2)
            if var.startswith("tmp"):
                if slot is not None:
                    _fail(where, f"`{k.name}` stores to {ptr} at `{expr}`: two indirect terms")
                slot = (coef, var)
            else:
                others.append(coef)
        if slot is None:
            _fail(where, f"`{k.name}` stores to {ptr} at `{expr}`: no slot term (the row is "
                         f"not written at a loaded index)")
        if slot[0] != kv.slot_stride:
            _fail(where, f"`{k.name}` stores to {ptr} at `{expr}`: the slot's coefficient is "
                         f"{slot[0]}, the token-major layout's token stride is "
                         f"{kv.slot_stride} (kv_heads x head_dim)")
        if any(c >= kv.slot_stride for c in others):
            _fail(where, f"`{k.name}` stores to {ptr} at `{expr}`: a coefficient of "
                         f"{max(others)} >= the token stride {kv.slot_stride} (a capacity "
                         f"term)")
        bound = bounds.get(slot[1])
        if bound != kv.max_len:
            _fail(where, f"`{k.name}`'s bounds check on the slot {slot[1]} is "
                         f"{'absent' if bound is None else f'< {bound}'}; the cache length "
                         f"is {kv.max_len}")
