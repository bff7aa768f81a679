"""The IR's dataflow check (kern_gen.llama.ir.check_dataflow)."""

from __future__ import annotations

import pytest

from kern_gen.llama.errors import WiringError
from kern_gen.llama.ir import KV_LENS, TOKEN_IDS, Op, Ref, check_dataflow


def test_a_read_needs_an_earlier_writer():
    ops = [Op("gemm", "o_proj", args={"a": Ref(buf="attn_out"), "c": Ref(buf="o")})]
    with pytest.raises(WiringError, match="reads `attn_out`, which no wired kernel wrote"):
        check_dataflow("decode", ops)
    check_dataflow("decode", [Op("embedding", "embed", args={"ids": TOKEN_IDS,
                                                              "out": Ref(buf="attn_out")}),
                              *ops])


@pytest.mark.parametrize("kind, ptrs, args", [
    ("mined", {3: ("inout", KV_LENS)}, {}),
    ("argmax", {}, {"x": Ref(buf="logits"), "out": TOKEN_IDS}),
])
def test_no_op_writes_an_input(kind, ptrs, args):
    # inputs stay constant for the whole program: the own attention reads kv_lens and the
    # block table before its PDL wait
    op = Op(kind, "bad", ptrs=ptrs, args=args)
    with pytest.raises(WiringError, match="writes the input `(kv_lens|token_ids)`"):
        check_dataflow("decode", [Op("embedding", "e", args={"ids": TOKEN_IDS,
                                                              "out": Ref(buf="logits")}), op])
