"""Pass 1-3: format version, symbol bounds, state sizes and alignment."""

from __future__ import annotations

from .. import paths
from .context import Context


def check_header(cx: Context) -> None:
    m, err = cx.m, cx.sink.error
    if m.meta.version != 2:
        err("E0101", f"unsupported format version {m.meta.version}", "meta.version",
            help="this verifier reads manifest format version 2")
    for name, s in m.symbols.items():
        p = paths.key("symbols", name)
        if s.max < 1:
            err("E0102", f"symbol `{name}` has max {s.max}; it must be at least 1", f"{p}.max")
        if s.min < 0:
            err("E0102", f"symbol `{name}` has min {s.min}; it must not be negative", f"{p}.min")
        if s.min > s.max >= 1:
            err("E0102", f"symbol `{name}` has min {s.min} above max {s.max}", f"{p}.min")
    for name, st in m.states.items():
        p = paths.key("states", name)
        if st.bytes_per_token < 0 or st.bytes_fixed < 0:
            field = "bytes_per_token" if st.bytes_per_token < 0 else "bytes_fixed"
            err("E0103", f"state `{name}` has a negative `{field}`", f"{p}.{field}")
        elif (st.bytes_per_token > 0) == (st.bytes_fixed > 0):
            which = "both are set" if st.bytes_per_token else "neither is set"
            err("E0103", f"state `{name}` needs exactly one of `bytes_per_token` and "
                f"`bytes_fixed` to be positive; {which}", p)
        if st.align < 1 or st.align & (st.align - 1):
            err("E0104", f"state `{name}` has alignment {st.align}, not a power of two",
                f"{p}.align")
