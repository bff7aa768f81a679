"""Assertions: each compares one fact of the capture/sidecar with what the wiring assumes
and raises :class:`WiringError` naming the call site and the fact.  None is vacuous: each
reads a value the capture or sidecar could have differently (tests alter one and expect
the refusal)."""

from __future__ import annotations

import json
import struct

from .errors import WiringError
from .facts import Facts, Site, Tensor
from .kv import KVLayout


def fail(where: str, fact: str) -> None:
    raise WiringError(f"{where}: {fact}")


def weight_is(facts: Facts, site: Site, key: tuple[int, int], name: str, where: str) -> Tensor:
    """The pointer at ``key`` (param, byte offset) is the sidecar weight ``name``, at its
    start, and stable over every forward of the group."""
    t = facts.weights.get(name)
    if t is None:
        fail(where, f"the sidecar has no weight `{name}`")
    addr = site.ptrs.get(key)
    if addr is None:
        fail(where, f"parameter {key[0]}+{key[1]} is not a device pointer; the wiring expects "
                    f"weight `{name}` there")
    if addr != t.ptr:
        hit = facts.tensor_at(addr)
        got = f"`{hit[1].name}`+{hit[2]}" if hit else "no sidecar tensor"
        fail(where, f"parameter {key[0]}+{key[1]} points to {addr:#x} ({got}); the wiring says "
                    f"weight `{name}` at {t.ptr:#x}")
    if site.klass.get(key) != "stable":
        fail(where, f"weight pointer `{name}` is not stable across forwards "
                    f"({site.klass.get(key)})")
    return t


def table_covers(kv: KVLayout, pages: int, page_tokens: int, where: str) -> None:
    """The paged attention's table (``pages`` columns of ``page_tokens`` slots, the
    ``block_table`` buffer's width and the kernels' row stride) addresses every slot the
    mined writers accept (``0 <= slot < L``, their compiled bound) and no whole page beyond:
    a shorter table would cut contexts the writers fill, a longer one would let a row name
    pages no capacity can hold."""
    need = -(-kv.max_len // page_tokens)
    if pages != need:
        fail(where, f"block_table has {pages} pages of {page_tokens} slots per row; the cache "
                    f"writers' bound L = {kv.max_len} needs exactly {need}")


def cache_is(facts: Facts, site: Site, param: int, name: str, where: str) -> Tensor:
    t = facts.cache.get(name)
    if t is None:
        fail(where, f"the sidecar has no cache tensor `{name}`")
    addr = site.ptrs.get((param, 0))
    if addr != t.ptr:
        hit = facts.tensor_at(addr) if addr is not None else None
        got = f"`{hit[1].name}`+{hit[2]}" if hit else "no sidecar tensor"
        fail(where, f"parameter {param} writes {addr if addr is None else hex(addr)} ({got}); "
                    f"the wiring says cache `{name}` at {t.ptr:#x}")
    return t


def slots_input(facts: Facts, site: Site, addr: int, where: str) -> None:
    """The cache writer's index pointer is the forward's own ``slots`` input (the sidecar's
    ``slots_ptr``: a per-token tensor the capture passes, not derived in the graph), so the
    writer loads one slot per row."""
    fwd = facts.sidecar_forward(site.forward)
    want = fwd.get("slots_ptr") if fwd else None
    if want is None:
        fail(where, "the sidecar records no `slots_ptr` for this forward: the capture was not "
                    "made with the token-major cache (capture/models/hf_capture.py "
                    "--cache-layout token-major)")
    if addr != want:
        also = " (it is the forward's position_ids)" if fwd and addr == fwd.get(
            "position_ids_ptr") else ""
        fail(where, f"the cache write index is read at {addr:#x}{also}, not at the forward's "
                    f"slots input {want:#x}")


def cache_layout(t: Tensor, kv: KVLayout, where: str) -> None:
    """The token-major layout ``[1, max_len, kv_heads, head_dim]`` bf16, contiguous: the
    strides the captured cache writers bake in and the attention kernel is told (:mod:`.kv`)."""
    shape, stride = kv.shape, kv.strides
    if t.shape != shape or t.stride != stride or t.dtype != kv.dtype:
        fail(where, f"sidecar cache `{t.name}` is {t.dtype}{t.shape} strides {t.stride}; the "
                    f"state layout assumes {kv.dtype}{shape} strides {stride}")
    if t.nbytes != kv.max_len * kv.bytes_per_token:
        fail(where, f"sidecar cache `{t.name}` holds {t.nbytes} bytes; {kv.max_len} token "
                    f"slots of bytes_per_token {kv.bytes_per_token} are "
                    f"{kv.max_len * kv.bytes_per_token}")


def scalars_are(site: Site, expected: list, where: str) -> None:
    """The site's scalar parameters, minus Triton's two trailing scratch pointers (asserted
    null), are exactly ``expected`` (kern-manifest expressions of ``tokens``)."""
    n = len(site.sizes)
    scal = sorted(site.scalars)
    for p in scal[-2:]:
        f = site.scalars[p]
        if p < n - 2 or f.verdict != "constant" or f.expr != 0:
            fail(where, f"parameter {p} should be a null Triton scratch pointer, "
                        f"found {f.verdict} {f.text}")
    got = []
    for p in scal[:-2]:
        f = site.scalars[p]
        if f.verdict not in ("constant", "fitted"):
            fail(where, f"scalar parameter {p} is {f.verdict} ({f.reason or f.alternatives})")
        got.append(f.expr)
    if _canon(got) != _canon(expected):
        fail(where, f"scalar literals {[_txt(e) for e in got]} differ from the config's "
                    f"{[_txt(e) for e in expected]}")


def eps_literal(facts: Facts, site: Site, eps: float, where: str) -> None:
    """The RMSNorm epsilon is compiled into the kernel: the f32 bit pattern of the config's
    ``rms_norm_eps`` must occur in the site's cubin (the kernels that apply a norm carry it
    as an immediate; kernels that only compute ``mean(x^2)`` do not)."""
    data = facts.capture.module_bytes(site.module or "")
    if data is None:
        fail(where, "no cubin in the capture to read the epsilon literal from")
    if struct.pack("<f", eps) not in data:
        fail(where, f"the cubin has no f32 literal {eps!r} (config rms_norm_eps, bits "
                    f"{struct.pack('<f', eps).hex()}): the captured norm used another epsilon")


def same_address(a: int | None, b: int | None, where: str, what: str) -> None:
    if a is None or a != b:
        fail(where, f"{what}: {a if a is None else hex(a)} vs "
                    f"{b if b is None else hex(b)}")


def _canon(x: object) -> str:
    return json.dumps(_plain(x), sort_keys=True)


def _plain(x: object) -> object:
    if isinstance(x, list):
        return [_plain(v) for v in x]
    if isinstance(x, int | str | float) or x is None:
        return x
    import msgspec
    return msgspec.to_builtins(x)


def _txt(e: object) -> str:
    p = _plain(e)
    if isinstance(p, int):
        return str(p)
    return json.dumps(p, separators=(",", ":"))
