"""DSpark's in-graph acceptance as verify's last dispatch (kernels/ABI.md 6, docs/dspark.md
step 7): the accepted prefix of verify's own rows against its ``predictions``, and the next
round's inputs into the ``next.*`` outputs, which the caller copies into the contract's inputs
on the device. Why an own kernel: the captured process accepts on its host, so no mined kernel
computes it; with it the host can queue a round before it has read the previous one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kern_manifest import contract as C

from .errors import WiringError
from .ir import Op

if TYPE_CHECKING:
    from .assemble import Assembler

LANES = 32
"""The kernel's one warp: the block + 1 rows it writes must fit in it."""
IFACE = ["in buffer<i64>", "in buffer<i64>", "in buffer<i64>", "out buffer<i64>",
         "out buffer<i64>", "out buffer<i32>", "out buffer<i32>", "i32", "i32", "i64"]
"""``(ids, preds, positions, next_ids, next_pos, draft_lens, verify_lens, w, block, mask)``
(ABI.md 6)."""
OUTS = (("next_ids", C.NEXT_TOKEN_IDS), ("next_pos", C.NEXT_POSITIONS),
        ("draft_lens", C.NEXT_DRAFT_KV_LENS), ("verify_lens", C.NEXT_VERIFY_KV_LENS))
"""The op's output args and the contract buffer each must be."""


def accept(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    """Op args: ``ids``, ``preds``, ``positions`` (verify's), the four outputs of
    :data:`OUTS`, ``block``, ``mask``; w is the program's rows."""
    a = op.args
    block = a["block"]
    if not 1 <= block < LANES:
        raise WiringError(f"{program}: {op.label}: block {block}; the own acceptance kernel "
                          f"is one warp (block + 1 ≤ {LANES})")
    for key, name in OUTS:
        if a[key].buf != name or a[key].offset:
            raise WiringError(f"{program}: {op.label}: `{key}` is `{a[key].buf}`; the caller "
                              f"contract names it `{name}`")
    body = {"params": IFACE, "impl": {"steps": [
        asm.own_step("accept.cubin", "kern_spec_accept", params=IFACE, block=[LANES, 1, 1],
                     grid=[1, 1, 1], args=[{"arg": i} for i in range(len(IFACE))])]}}
    name = asm.kernel(f"{program}.accept", body, "own acceptance step (next round's inputs)")
    w = {"sym": "tokens"} if isinstance(rows, dict) else {"i32": rows}
    return {"label": op.label, "kernel": name,
            "args": [asm.arg(a["ids"]), asm.arg(a["preds"]), asm.arg(a["positions"]),
                     *(asm.arg(a[k]) for k, _ in OUTS), w, {"i32": block},
                     {"i64": a["mask"]}]}
