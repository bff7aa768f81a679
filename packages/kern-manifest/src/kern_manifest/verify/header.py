"""Pass 1-3: format version, symbol bounds, state sizes and alignment (symbol maxima and
state sizes under the size rule, :func:`kern_manifest.sizes.fits_u64`)."""

from __future__ import annotations

from .. import paths
from ..sizes import fits_u64
from .context import Context

#: The largest power of two an unsigned 64-bit alignment can hold.
_MAX_ALIGN = 2**63


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
        if s.max >= 1 and not fits_u64(s.max):
            err("E0102", f"symbol `{name}` has max {s.max}, above 2^64-1; symbols are "
                "unsigned 64-bit values", f"{p}.max")
    for name, st in m.states.items():
        p = paths.key("states", name)
        if st.bytes_per_token < 0 or st.bytes_fixed < 0:
            field = "bytes_per_token" if st.bytes_per_token < 0 else "bytes_fixed"
            err("E0103", f"state `{name}` has a negative `{field}`", f"{p}.{field}")
        elif (st.bytes_per_token > 0) == (st.bytes_fixed > 0):
            which = "both are set" if st.bytes_per_token else "neither is set"
            err("E0103", f"state `{name}` needs exactly one of `bytes_per_token` and "
                f"`bytes_fixed` to be positive; {which}", p)
        for field in ("bytes_per_token", "bytes_fixed"):
            # At capacity 1 a per-token state is `bytes_per_token` bytes: the least it is.
            if not fits_u64(max(getattr(st, field), 0)):
                err("E0105", f"state `{name}` has `{field}` {getattr(st, field)}, larger than "
                    "2^64-1 bytes", f"{p}.{field}")
        if st.align < 1 or st.align & (st.align - 1):
            err("E0104", f"state `{name}` has alignment {st.align}, not a power of two",
                f"{p}.align")
        elif st.align > _MAX_ALIGN:
            err("E0104", f"state `{name}` has alignment {st.align}, above 2^63 (the largest "
                "power of two in 64 bits)", f"{p}.align")
