"""The startup summary: what a runtime loaded, as text (pure).

Shows the manifest label, symbols, states and their sizes, buffer counts and bytes per
class, every kernel's steps (symbol, parameter layout, resolved module; externs as
built-in), weights bound, and the graphs captured so far.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kern_manifest import VerifiedManifest, abi_layout, format_expr
from msgspec import UNSET

from .artifacts import Resolution
from .memory_plan import MemoryPlan


def human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


@dataclass
class WeightsInfo:
    files: list[str] = field(default_factory=list)
    count: int = 0
    nbytes: int = 0
    seconds: float = 0.0
    unused_tensors: int = 0


@dataclass
class GraphInfo:
    program: str
    symbols: Mapping[str, int]
    nodes: int
    capture_ms: float


def render_summary(vm: VerifiedManifest, plan: MemoryPlan,
                   resolutions: Mapping[tuple[str, int], Resolution], weights: WeightsInfo,
                   graphs: Sequence[GraphInfo], device: str = "", extras: Sequence[str] = ()
                   ) -> str:
    m = vm.manifest
    lines = [f"kern-runtime: manifest `{m.meta.model}` (format v{m.meta.version})"]
    if device:
        lines.append(f"  {device}")
    lines.extend(f"  {e}" for e in extras)
    syms = ", ".join(f"{n} ∈ [{s.min}, {s.max}]" for n, s in m.symbols.items()) or "none"
    lines.append(f"symbols: {syms}")
    if m.states:
        # Only per-token states scale with capacity; fixed ones (bytes_fixed) have none.
        cap = f"capacity {plan.capacity} tokens" if plan.capacity is not None else "fixed size"
        lines.append(f"states ({cap}):")
        for n, s in m.states.items():
            per = (f"{s.bytes_fixed} B fixed" if s.bytes_fixed
                   else f"{s.bytes_per_token} B/token")
            lines.append(f"  {n}: {per} -> {human_bytes(plan.states[n].nbytes)}")
    else:
        lines.append("states: none")
    lines.append(f"memory: {human_bytes(plan.total)} in one arena (buffers at symbol maxima)")
    for cls, (count, nb) in plan.class_totals().items():
        lines.append(f"  {cls:<9} {count:>5} × -> {human_bytes(nb)}")
    lines.append(f"kernels: {len(m.kernels)}")
    for kname, k in m.kernels.items():
        lines.append(f"  {kname} ({len(k.impl.steps)} step{'s' if len(k.impl.steps) > 1 else ''})")
        for j, s in enumerate(k.impl.steps):
            r = resolutions.get((kname, j))
            if s.is_extern:
                where = "built-in"
            elif r is None:
                where = "unresolved"
            else:
                where = f"{r.module}{' (pinned)' if r.pinned else ' (found by layout)'}"
            layout = " ".join(f"{o}:{sz}" for o, sz in abi_layout(s.params))
            geo = ", ".join(format_expr(g) for g in s.grid)
            smem = "" if s.shared_mem is UNSET else f" smem {format_expr(s.shared_mem)}"  # type: ignore[arg-type]
            lines.append(f"    [{j}] {s.symbol} <- {where}")
            lines.append(f"        params ({len(s.params)}; offset:size) {layout}")
            lines.append(f"        grid ({geo}) block {tuple(s.block)}{smem}")
    if weights.count:
        rate = weights.nbytes / weights.seconds / 1e9 if weights.seconds > 0 else float("nan")
        lines.append(f"weights: {weights.count} bound, {human_bytes(weights.nbytes)} from "
                     f"{len(weights.files)} file(s) in {weights.seconds:.2f} s ({rate:.2f} GB/s)"
                     + (f"; {weights.unused_tensors} tensor(s) in the files unused"
                        if weights.unused_tensors else ""))
    else:
        lines.append("weights: none")
    lines.append("programs: " + ", ".join(f"{n} ({len(p.dispatches)} dispatches)"
                                          for n, p in m.programs.items()))
    if graphs:
        lines.append(f"graphs captured: {len(graphs)}")
        for g in graphs:
            syms = ", ".join(f"{k}={v}" for k, v in g.symbols.items())
            lines.append(f"  {g.program} [{syms}]: {g.nodes} launches, captured in {g.capture_ms:.1f} ms")
    else:
        lines.append("graphs captured: none yet")
    return "\n".join(lines)
