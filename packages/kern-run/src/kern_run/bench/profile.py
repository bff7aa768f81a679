"""Where the GPU time of one step goes: ``kern-run bench --profile``.

Two halves:

- :func:`record_program` (GPU machine only; imports torch lazily; ``kern-run bench`` runs it
  in a child process, :mod:`.torch_side`): replays ``rt.run(program, symbols)`` back-to-back
  under ``torch.profiler`` (CUDA activity only; kineto/CUPTI records every kernel of the
  process, including those our CUDA graphs launch through cuda-bindings on the device's
  primary context, which torch shares) and returns the recorded kernels.
- :func:`breakdown` (pure, no torch): per-step numbers from ``(name, start_us, dur_us)``
  kernel records.

Units: every time is microseconds (µs); "per step" means the total over the recorded
records divided by ``steps``. Timestamps are taken under CUPTI tracing, so a traced step may
be slightly slower than an untraced one."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kern_manifest import KernError

#: Category names, in report order.
GEMM, GEMV, TRITON, OWN, OTHER = ("GEMM (cuBLAS)", "GEMM (own GEMV)", "Inductor (Triton)",
                                  "own (kern_*)", "other")
CATEGORIES = (GEMM, GEMV, TRITON, OWN, OTHER)
_GEMM_MARKS = ("nvjet", "cublas", "gemm", "splitkreduce")
#: Device-side activities that are not kernels (CUPTI memcpy/memset/sync records).
_NOT_KERNELS = ("Memcpy", "Memset", "Event Sync", "Stream Sync", "Context Sync",
                "Stream Wait Event")
TOP = 10
#: Back-to-back steps recorded per profile.
STEPS = 20


class ProfileError(KernError, RuntimeError):
    """The profile could not be taken or holds no kernels; the message says why (a command
    exits 1: the run failed)."""

    exit_code = 1


def category(name: str) -> str:
    """The category of a kernel name (see :data:`CATEGORIES`)."""
    low = name.lower()
    if name.startswith("kern_gemv"):
        return GEMV
    if any(m in low for m in _GEMM_MARKS):
        return GEMM
    if name.startswith("triton_"):
        return TRITON
    if name.startswith("kern_"):
        return OWN
    return OTHER


@dataclass(frozen=True)
class Group:
    """Kernels grouped by category or by name. ``count``: kernels per step; ``us``: µs per
    step (sum of durations / steps); ``mean_us``: µs per kernel (0 when there are none)."""
    name: str
    count: float
    us: float
    mean_us: float
    category: str = ""


@dataclass(frozen=True)
class Breakdown:
    """Per-step numbers of ``steps`` back-to-back steps. ``busy_us``: sum of kernel durations;
    ``span_us``: first kernel start to last kernel end; ``gaps_us``: span − busy (idle GPU
    between kernels; negative only if kernels overlapped). ``categories``: one :class:`Group`
    per :data:`CATEGORIES` entry, in that order; ``top``: the :data:`TOP` kernel names with
    the most time per step, most first."""
    steps: int
    kernels: float
    busy_us: float
    span_us: float
    gaps_us: float
    categories: list[Group]
    top: list[Group]

    def share(self, cat: str) -> float:
        """Fraction of ``busy_us`` spent in category ``cat`` (0..1)."""
        g = next(g for g in self.categories if g.name == cat)
        return g.us / self.busy_us if self.busy_us > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form (µs per step, kernels per step)."""
        return asdict(self)

    def lines(self, width: int = 72) -> list[str]:
        """A compact text table; kernel names are cut to ``width`` characters."""
        gap_pct = 100 * self.gaps_us / self.span_us if self.span_us > 0 else 0.0
        out = [(f"{self.steps} steps, {self.kernels:.1f} kernels/step: GPU busy "
                f"{self.busy_us:.1f} µs/step, span {self.span_us:.1f} µs/step, gaps "
                f"{self.gaps_us:.1f} µs/step ({gap_pct:.1f} % of span)"),
               (f"  {'category':<18} {'kernels/step':>12} {'µs/step':>9} {'µs/kernel':>9} "
                f"{'busy':>6}")]
        for g in self.categories:
            out.append(f"  {g.name:<18} {g.count:>12.1f} {g.us:>9.1f} {g.mean_us:>9.2f} "
                       f"{100 * self.share(g.name):>5.1f}%")
        out.append(f"  top {len(self.top)} kernels by time per step:")
        out.append(f"  {'µs/step':>9} {'kernels/step':>12} {'µs/kernel':>9}  name")
        for g in self.top:
            name = g.name if len(g.name) <= width else g.name[:width - 1] + "…"
            out.append(f"  {g.us:>9.1f} {g.count:>12.1f} {g.mean_us:>9.2f}  {name}")
        return out


def breakdown(events: Iterable[tuple[str, float, float]], steps: int) -> Breakdown:
    """The :class:`Breakdown` of kernel records ``(name, start_us, dur_us)`` (any order) that
    cover ``steps`` back-to-back steps. Raises ``ValueError`` on no records or ``steps`` < 1."""
    if steps < 1:
        raise ValueError(f"breakdown: steps must be at least 1 (got {steps})")
    evs = list(events)
    if not evs:
        raise ValueError("breakdown: no kernel records (the profiler recorded no CUDA kernels "
                         "for the profiled steps)")
    busy = sum(d for _, _, d in evs)
    span = max(s + d for _, s, d in evs) - min(s for _, s, _ in evs)
    by_cat: dict[str, list[float]] = {c: [0, 0.0] for c in CATEGORIES}
    by_name: dict[str, list[float]] = {}
    for name, _, d in evs:
        for acc in (by_cat[category(name)], by_name.setdefault(name, [0, 0.0])):
            acc[0] += 1
            acc[1] += d

    def group(name: str, n: float, us: float, cat: str = "") -> Group:
        return Group(name, n / steps, us / steps, us / n if n else 0.0, cat)

    cats = [group(c, *by_cat[c]) for c in CATEGORIES]
    ranked = sorted(by_name.items(), key=lambda kv: (-kv[1][1], kv[0]))[:TOP]
    top = [group(n, *acc, category(n)) for n, acc in ranked]
    return Breakdown(steps, len(evs) / steps, busy / steps, span / steps,
                     (span - busy) / steps, cats, top)


# -- taking the profile (GPU machine) ----------------------------------------------------
def _is_kernel(name: str) -> bool:
    return not name.startswith(_NOT_KERNELS)


def _is_cuda(device_type: Any) -> bool:
    return getattr(device_type, "name", None) == "CUDA" or str(device_type).endswith("CUDA")


def _from_kineto(prof: Any) -> list[tuple[str, float, float]]:
    """Kernel records from ``prof.profiler.kineto_results.events()`` (device_type CUDA;
    ``start_ns``/``duration_ns`` in torch ≥ 2.1, else ``start_us``/``duration_us``)."""
    out = []
    for e in prof.profiler.kineto_results.events():
        if not _is_cuda(e.device_type()) or not _is_kernel(e.name()):
            continue
        if hasattr(e, "start_ns"):
            out.append((e.name(), e.start_ns() / 1000, e.duration_ns() / 1000))
        else:
            out.append((e.name(), float(e.start_us()), float(e.duration_us())))
    return out


def _from_chrome_trace(prof: Any) -> list[tuple[str, float, float]]:
    """Kernel records from ``prof.export_chrome_trace`` (events with ``cat`` "kernel";
    ``ts``/``dur`` are µs in the Chrome trace format)."""
    with tempfile.TemporaryDirectory(prefix="kern-run-profile-") as d:
        p = Path(d) / "trace.json"
        prof.export_chrome_trace(str(p))
        doc = json.loads(p.read_text())
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [(e["name"], float(e["ts"]), float(e["dur"])) for e in evs
            if e.get("cat") == "kernel" and e.get("ph", "X") == "X"]


def kernel_events(prof: Any) -> list[tuple[str, float, float]]:
    """The kernel records ``(name, start_us, dur_us)`` of a finished ``torch.profiler`` run:
    kineto's results, else the Chrome trace. Raises :class:`ProfileError` naming what each
    source gave when neither yields a kernel."""
    why = []
    for source in (_from_kineto, _from_chrome_trace):
        try:
            evs = source(prof)
        except Exception as err:  # an API that moved between torch versions: try the next
            why.append(f"{source.__name__}: {type(err).__name__}: {err}")
            continue
        if evs:
            return evs
        why.append(f"{source.__name__}: no kernel events")
    raise ProfileError("torch.profiler recorded no CUDA kernels (is CUPTI usable here?): "
                       + "; ".join(why))


def record_program(rt: Any, program: str, symbols: Mapping[str, int], *, gpu: int,
                   steps: int = STEPS, warmup: int = 3) -> list[tuple[str, float, float]]:
    """Replay ``rt.run(program, symbols)`` ``warmup`` times, then ``steps`` times back-to-back
    under ``torch.profiler`` (CUDA activity), and return the recorded kernels
    (:func:`kernel_events`; :func:`breakdown` makes the numbers). ``rt``: a loaded kern
    ``Runtime`` on device ``gpu``. The profiler stays subscribed in the process afterwards:
    ``kern-run bench`` calls this in a child process."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.init()           # torch on the same device (its primary context is ours too)
    torch.cuda.set_device(gpu)
    for _ in range(warmup):
        rt.run(program, symbols)
    rt.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            rt.run(program, symbols)
        rt.synchronize()     # every kernel has finished before the trace stops
    return kernel_events(prof)


def summary_rows(b: Breakdown) -> list[tuple[str, str, str]]:
    """(measurement, kern, note) rows for the bench table."""
    cats = ", ".join(f"{g.name} {g.us:.1f}" for g in b.categories)
    return [("decode GPU busy / gaps µs/step (profiled)", f"{b.busy_us:.1f} / {b.gaps_us:.1f}",
             f"{b.kernels:.1f} kernels/step, span {b.span_us:.1f} µs/step"),
            ("decode GEMM share of GPU busy", f"{b.share(GEMM) + b.share(GEMV):.1%}",
             f"µs/step: {cats}")]


def format_lines(title: str, lines: Sequence[str]) -> str:
    """``lines`` under ``title`` as one stderr block."""
    return "".join(f"bench: {title}: {ln}\n" if i == 0 else f"bench:   {ln}\n"
                   for i, ln in enumerate(lines))
