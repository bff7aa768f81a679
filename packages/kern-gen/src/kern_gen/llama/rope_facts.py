"""The facts every rope fusion proves before it replaces captured kernels
(:mod:`.fuse_rope`, :mod:`.fuse_rope_qk_norm`): which ATen ops a captured kernel fuses (by its
Inductor name), where the rope angles come from, and which K/V states a layer writes."""

from __future__ import annotations

from .errors import WiringError
from .ir import Op, Program, Ref, op_where, writes

#: the ATen ops a rotate-half rope and an ``index_copy_`` cache write fuse into (the words of
#: Inductor's ``triton_poi_fused_<ops>_<n>`` names)
ROPE_OPS = frozenset({"to_copy", "unsafe_view", "add", "bmm", "cat", "cos", "sin", "mul",
                      "neg", "slice", "transpose", "unsqueeze", "view", "index_copy", "expand",
                      "clone"})
#: the ATen ops Qwen3's per-head q/k RMSNorm adds to its rope kernels (``mean``, ``pow``,
#: ``rsqrt``; its weight multiply is ``mul``)
NORM_OPS = frozenset({"mean", "pow", "rsqrt"})


def aten_ops(kernel: str) -> set[str]:
    """The ATen op names in an Inductor kernel name ``triton_<kind>_fused_<op>_<op>…_<n>``
    (kind ``poi``, ``per`` or ``red``; ``_to_copy`` is ``to_copy``; the trailing index
    dropped); empty for other names."""
    head = next((h for h in (f"triton_{k}_fused_" for k in ("poi", "per", "red"))
                 if kernel.startswith(h)), None)
    if head is None:
        return set()
    words = kernel[len(head):].rstrip("0123456789").strip("_").split("_")
    ops, i = set(), 0
    while i < len(words):   # the two-word ops Inductor names with one underscore inside
        two = f"{words[i]}_{words[i + 1]}" if i + 1 < len(words) else ""
        if two in ("to_copy", "unsafe_view", "index_copy"):
            ops.add(two)
            i += 2
        else:
            ops.add(words[i])
            i += 1
    ops.discard("")
    return ops


def at(prog: Program, op: Op) -> str:
    return op_where(prog.name, op)


def only_rope_ops(prog: Program, kernels: tuple[Op, ...],
                   more: frozenset[str] = frozenset()) -> None:
    """Each kernel's Inductor name lists only :data:`ROPE_OPS` (and ``more``)."""
    for o in kernels:
        name = o.site.name if o.site else "?"
        found = aten_ops(name)
        extra = found - ROPE_OPS - more
        if not found or extra:
            raise WiringError(f"{at(prog, o)}: kernel `{name}` "
                              f"fuses ATen ops beyond a rotate-half rope and a cache copy "
                              f"({', '.join(sorted(extra)) or 'no Inductor name'}); "
                              f"not fused into one own rope launch (`--no-fuse` keeps the "
                              f"captured kernels)")


def angles_from_own_kernel(prog: Program, ops: list[Op], j: int, k: Op,
                           kin: dict[str, list[Ref]], q: Op, ang: Ref) -> None:
    """k rope reads q rope's angles, and they come from the own angle kernel."""
    if ang not in kin["in"]:
        raise WiringError(f"{at(prog, k)}: k rope reads other angles than q rope "
                          f"(`{ang.buf}`)")
    producer = next((o for o in reversed(ops[:j]) if ang.buf in
                     [r.buf for _, r in writes(o)]), None)
    if producer is None or producer.kind != "angles":
        raise WiringError(f"{at(prog, q)}: the angles `{ang.buf}` do not come from the "
                          f"own angle kernel ([D/2, tokens] f32)")


def layer_states(prog: Program, k: Op, layer: str, kst: Ref, vst: Ref) -> None:
    """The writes go to one layer's K and V states: the target's ``kv.<layer>.k`` / ``.v`` or
    a DSpark draft's ``draft.kv.<layer>.k`` / ``.v`` (its own KV, docs/dspark.md)."""
    want = [(f"{pre}kv.{layer}.k", f"{pre}kv.{layer}.v") for pre in ("", "draft.")]
    if (kst.state, vst.state) not in want or kst.offset or vst.offset:
        raise WiringError(f"{at(prog, k)}: writes `{kst.state}` / `{vst.state}`, not the "
                          f"layer's K/V states kv.{layer}.k / kv.{layer}.v")
