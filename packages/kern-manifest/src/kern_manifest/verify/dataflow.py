"""Pass 8: per-program dataflow over buffers, and outputs/carries written somewhere."""

from __future__ import annotations

from .. import paths
from .context import Context, dispatch_ref

#: Classes whose contents exist when a program starts.
_LIVE_AT_START = ("input", "weight", "carry")
_READ_ONLY = ("input", "weight")


def check_dataflow(cx: Context) -> None:
    err, m = cx.sink.error, cx.m
    # Per kernel, the (position, reads, writes) of its memory parameters.
    mem = {k: [(i, p.reads, p.writes) for i, p in enumerate(ps) if p.is_memory]
           for k, ps in cx.iface.items()}
    buffers = m.buffers
    written_anywhere: set[str] = set()
    for pname, prog in m.programs.items():
        base = f"{paths.key('programs', pname)}.dispatches"
        written = {n for n, b in m.buffers.items() if b.cls in _LIVE_AT_START}
        reported: set[str] = set()
        for d, disp in enumerate(prog.dispatches):
            params = mem.get(disp.kernel)
            if params is None:
                continue
            args = disp.args
            writes = []
            for i, reads, writes_ in params:
                if i >= len(args) or args[i].kind != "buf" or args[i].buf not in buffers:
                    continue
                name = args[i].buf
                cls = buffers[name].cls
                if reads and name not in written and name not in reported:
                    reported.add(name)
                    err("E0701", f"`{name}` ({cls}) is read before any dispatch of program "
                        f"`{pname}` wrote it{dispatch_ref(disp.label)}", f"{base}[{d}].args[{i}]")
                if writes_:
                    if cls in _READ_ONLY:
                        err("E0702", f"`{name}` is an {cls} buffer and must not be written"
                            f"{dispatch_ref(disp.label)}", f"{base}[{d}].args[{i}]")
                    writes.append(name)
            written.update(writes)
            written_anywhere.update(writes)
    for name, b in m.buffers.items():
        if b.cls in ("output", "carry") and name not in written_anywhere:
            err("E0703", f"{b.cls} buffer `{name}` is never written by any program",
                paths.key("buffers", name))
