"""Pass 6: an impl against its interface — directions, interface `out` parameters, and
scratch dataflow across the steps of one dispatch."""

from __future__ import annotations

from .. import paths
from ..dtypes import parse_param_type
from .context import Context


def check_impls(cx: Context) -> None:
    err = cx.sink.error
    for kname, k in cx.m.kernels.items():
        base = paths.key("kernels", kname)
        iface = cx.iface[kname]
        written_iface: set[int] = set()
        written_scratch: set[str] = set()
        used_scratch: set[str] = set()
        for j, step in enumerate(k.impl.steps):
            p = f"{base}.impl.steps[{j}]"
            writes: list[tuple[str, object]] = []
            # A launch reads its inputs before any of its writes land: check every read of
            # this step against the state before the step, then record its writes.
            for i, (a, text) in enumerate(zip(step.args, step.params)):
                sp = parse_param_type(text)
                if not sp.is_memory:
                    continue
                ap = f"{p}.args[{i}]"
                if a.kind == "arg" and a.arg < len(iface):
                    ip = iface[a.arg]
                    if not ip.is_memory:
                        continue
                    if sp.writes and ip.direction == "in":
                        err("E0501", f"step parameter {i} (`{sp}`) writes interface parameter "
                            f"{a.arg}, which is declared `{ip}`", ap)
                    if sp.reads and ip.direction == "out" and a.arg not in written_iface:
                        err("E0503", f"step parameter {i} (`{sp}`) reads interface parameter "
                            f"{a.arg} (`{ip}`) before any step wrote it", ap)
                    if sp.writes:
                        writes.append(("arg", a.arg))
                elif a.kind == "scratch" and a.scratch in k.impl.scratch:
                    used_scratch.add(a.scratch)
                    if sp.reads and a.scratch not in written_scratch:
                        err("E0504", f"scratch `{a.scratch}` is read before any step wrote it",
                            ap)
                    if sp.writes:
                        writes.append(("scratch", a.scratch))
            for kind, what in writes:
                (written_iface if kind == "arg" else written_scratch).add(what)  # type: ignore[arg-type]
        for i, ip in enumerate(iface):
            if ip.direction == "out" and i not in written_iface:
                err("E0502", f"interface parameter {i} (`{ip}`) of kernel `{kname}` is never "
                    "written by a step", f"{base}.params[{i}]")
        for sname in k.impl.scratch:
            if sname not in used_scratch:
                err("E0505", f"scratch `{sname}` of kernel `{kname}` is never used",
                    paths.key(f"{base}.impl.scratch", sname))
