"""Pass 9: every declared symbol, state, buffer and kernel is used."""

from __future__ import annotations

from msgspec import UNSET

from .. import paths
from ..expr import expr_symbols
from ..schema import ExprNode
from .context import Context


def _shape_syms(shape, out: set[str]) -> None:
    out.update(d for d in shape if isinstance(d, str))


def check_usage(cx: Context) -> None:
    m = cx.m
    syms: set[str] = set()
    states: set[str] = set()
    bufs: set[str] = set()
    kernels: set[str] = set()
    for b in m.buffers.values():
        _shape_syms(b.shape, syms)
        if b.domain is not UNSET:
            for v in (b.domain.min, b.domain.max):
                if isinstance(v, ExprNode):
                    syms.update(expr_symbols(v))
    for k in m.kernels.values():
        for sc in k.impl.scratch.values():
            _shape_syms(sc.shape, syms)
        for st in k.impl.steps:
            for e in st.grid:
                syms.update(expr_symbols(e))
            if st.shared_mem is not UNSET:
                syms.update(expr_symbols(st.shared_mem))
    for prog in m.programs.values():
        for disp in prog.dispatches:
            kernels.add(disp.kernel)
            for a in disp.args:
                kind = a.kind
                if kind == "buf":
                    bufs.add(a.buf)
                elif kind == "state":
                    states.add(a.state)
                elif kind == "sym":
                    syms.add(a.sym)
                elif kind == "expr":
                    syms.update(expr_symbols(a.expr))
    for section, decls, used in (("symbols", m.symbols, syms), ("states", m.states, states),
                                 ("buffers", m.buffers, bufs), ("kernels", m.kernels, kernels)):
        what = section[:-1]
        for name in decls:
            # An unused output or carry is never written either; E0703 already says so.
            if section == "buffers" and m.buffers[name].cls in ("output", "carry"):
                continue
            if name not in used:
                cx.sink.error("E0801", f"{what} `{name}` is declared but never used",
                              paths.key(section, name), help=f"remove the {what} or use it")
