"""Pass 7: every dispatch argument against its kernel's interface parameter."""

from __future__ import annotations

from .. import paths
from ..dtypes import DTYPE_SIZES, INT_RANGES, ParamType
from ..expr import ExprError
from ..schema import LITERAL_KINDS, Arg
from ..sizes import fits_u64, nbytes
from .context import Context, dispatch_ref
from .literals import literal_problem


def _check_range(cx: Context, lo: int, hi: int, p: ParamType, what: str, ap: str,
                 where: str) -> None:
    tlo, thi = INT_RANGES[p.scalar]  # type: ignore[index]
    if lo < tlo or hi > thi:
        cx.sink.error("E0606", f"{what} ranges over [{lo}, {hi}], which does not fit "
                      f"`{p.scalar}` [{tlo}, {thi}]{where}", ap)


def _check_arg(cx: Context, a: Arg, p: ParamType, i: int, ap: str, where: str) -> None:
    err, m = cx.sink.error, cx.m
    kind = a.kind
    if kind == "buf":
        buf = m.buffers.get(a.buf)
        if buf is None:
            err("E0605", f"unknown buffer `{a.buf}`{where}", ap)
        elif p.kind != "buffer":
            err("E0603", f"buffer `{a.buf}` passed to parameter {i} of type `{p}`{where}", ap,
                help="a state binds to `ptr`; buffers bind to `buffer<DTYPE>`"
                if p.kind == "ptr" else None)
        elif buf.dtype != p.dtype:
            err("E0604", f"buffer `{a.buf}` is {buf.dtype} but parameter {i} takes "
                f"`{p}`{where}", ap)
        else:
            _check_offset(cx, a, buf, ap, where)
    elif kind == "state":
        if a.state not in m.states:
            err("E0605", f"unknown state `{a.state}`{where}", ap)
        elif p.kind != "ptr":
            err("E0603", f"state `{a.state}` passed to parameter {i} of type `{p}`; states "
                f"bind only to `ptr`{where}", ap)
        elif not fits_u64(a.byte_offset):
            # The state's size depends on the caller's capacity (checked at load); statically
            # the offset must still be a 64-bit value.
            err("E0608", f"offset {a.byte_offset} into state `{a.state}` does not fit in 64 "
                f"bits{where}", f"{ap}.offset")
    elif kind in ("sym", "expr"):
        if p.kind != "scalar" or p.scalar not in INT_RANGES:
            err("E0603", f"{'symbol' if kind == 'sym' else 'expression'} passed to parameter "
                f"{i} of type `{p}`; symbols and expressions bind to integer scalars{where}", ap)
            return
        if kind == "sym":
            s = m.symbols.get(a.sym)
            if s is None:
                err("E0605", f"unknown symbol `{a.sym}`{where}", ap)
            else:
                _check_range(cx, s.min, s.max, p, f"symbol `{a.sym}`", ap, where)
        else:
            got = cx.eval_corners(a.expr, f"{ap}.expr", f"expression{where}")
            if got is not None:
                _check_range(cx, got[0], got[1], p, "the expression", ap, where)
    else:
        assert kind in LITERAL_KINDS
        if p.kind != "scalar" or p.scalar != kind:
            err("E0603", f"{kind} literal passed to parameter {i} of type `{p}`{where}", ap)
        problem = literal_problem(kind, getattr(a, kind))
        if problem:
            err("E0409", problem + where, ap)


def _check_offset(cx: Context, a: Arg, buf, ap: str, where: str) -> None:
    off = a.byte_offset
    if not off:
        return
    elem = DTYPE_SIZES[buf.dtype]
    if off % elem:
        cx.sink.error("E0607", f"offset {off} into `{a.buf}` is not a multiple of its "
                      f"{elem}-byte {buf.dtype} element{where}", f"{ap}.offset")
        return
    try:
        size = nbytes(buf, cx.lo)
    except ExprError:
        return  # reported by the buffers pass
    if off >= size:
        cx.sink.error("E0608", f"offset {off} is outside `{a.buf}`, which is {size} bytes at "
                      f"the symbol minima{where}", f"{ap}.offset")


def check_dispatches(cx: Context) -> None:
    err = cx.sink.error
    # Real manifests repeat the same (argument, parameter) binding across layers; a binding
    # that checked clean once is clean everywhere (the check reads only the manifest).
    clean: set[tuple[Arg, str]] = set()
    kernels = cx.m.kernels
    for pname, prog in cx.m.programs.items():
        base = f"{paths.key('programs', pname)}.dispatches"
        for d, disp in enumerate(prog.dispatches):
            kernel = kernels.get(disp.kernel)
            if kernel is None:
                err("E0601", f"unknown kernel `{disp.kernel}`{dispatch_ref(disp.label)}",
                    f"{base}[{d}].kernel")
                continue
            texts = kernel.params
            if len(disp.args) != len(texts):
                err("E0602", f"kernel `{disp.kernel}` takes {len(texts)} arguments, the "
                    f"dispatch passes {len(disp.args)}{dispatch_ref(disp.label)}",
                    f"{base}[{d}].args")
            iface = cx.iface[disp.kernel]
            for i, (a, text) in enumerate(zip(disp.args, texts)):
                if (a, text) in clean:
                    continue
                before = len(cx.sink.items)
                _check_arg(cx, a, iface[i], i, f"{base}[{d}].args[{i}]", dispatch_ref(disp.label))
                if len(cx.sink.items) == before:
                    clean.add((a, text))
