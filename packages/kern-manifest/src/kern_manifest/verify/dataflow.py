"""Pass 8: per-program dataflow over buffers, and outputs/carries written somewhere."""

from __future__ import annotations

from .. import paths
from .context import Context, dispatch_ref

#: Classes whose contents exist when a program starts.
_LIVE_AT_START = ("input", "weight", "carry")
_READ_ONLY = ("input", "weight")


def check_dataflow(cx: Context) -> None:
    err, m = cx.sink.error, cx.m
    written_anywhere: set[str] = set()
    for pname, prog in m.programs.items():
        base = f"{paths.key('programs', pname)}.dispatches"
        written = {n for n, b in m.buffers.items() if b.cls in _LIVE_AT_START}
        reported: set[str] = set()
        for d, disp in enumerate(prog.dispatches):
            iface = cx.iface.get(disp.kernel)
            if iface is None:
                continue
            where = dispatch_ref(disp.label)
            writes = []
            for i, (a, ip) in enumerate(zip(disp.args, iface)):
                if a.kind != "buf" or not ip.is_memory or a.buf not in m.buffers:
                    continue
                ap = f"{base}[{d}].args[{i}]"
                cls = m.buffers[a.buf].cls
                if ip.reads and a.buf not in written and a.buf not in reported:
                    reported.add(a.buf)
                    err("E0701", f"`{a.buf}` ({cls}) is read before any dispatch of program "
                        f"`{pname}` wrote it{where}", ap)
                if ip.writes:
                    if cls in _READ_ONLY:
                        err("E0702", f"`{a.buf}` is an {cls} buffer and must not be written"
                            f"{where}", ap)
                    writes.append(a.buf)
            written.update(writes)
            written_anywhere.update(writes)
    for name, b in m.buffers.items():
        if b.cls in ("output", "carry") and name not in written_anywhere:
            err("E0703", f"{b.cls} buffer `{name}` is never written by any program",
                paths.key("buffers", name))
