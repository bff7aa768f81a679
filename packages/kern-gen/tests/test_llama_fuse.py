"""Fused GEMVs (``kern_gen.llama.fuse``): on both committed captures the fused ``decode`` and
``verify`` compute what the unfused ones compute -- every kept kernel argument reads the value
the same producer wrote (a symbolic replay over buffers and byte offsets) -- and every
precondition of a fusion refuses an altered program."""

from __future__ import annotations

from pathlib import Path

import pytest
from kg_own import wiring_inputs

from kern_gen.llama import WiringError
from kern_gen.llama import merge as M
from kern_gen.llama.command import PRESETS
from kern_gen.llama.fuse import fuse_program
from kern_gen.llama.ir import TOK, TOKEN_IDS, Op, Program, Ref, reads, writes
from kern_gen.llama.programs import PROGRAMS

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module", params=[p for p in ("llama", "qwen3")
                                        if (ROOT / PRESETS[p][0]).is_dir()])
def programs(request, tmp_path_factory):
    _, cfg, g = wiring_inputs(request.param, tmp_path_factory.mktemp("mined"))
    return cfg, {n: M.merge_projections(PROGRAMS[n](g), cfg) for n in ("decode", "verify")}


def _replaced_writes(o: Op) -> dict[tuple[str, int], str]:
    """The values a fused op writes, named after the unfused ops that wrote them."""
    layer = o.label.split(".")[0]
    if o.kind == "gemm_silu":
        c = o.args["c"]
        return {(c.buf, c.offset): f"{layer}.silu_mul"}
    if o.kind == "gemm_split":
        return {(o.args[f"c{i}"].buf, o.args[f"c{i}"].offset): f"{layer}.self_attn.{p}_proj"
                for i, p in enumerate("qkv")}
    return {(r.buf, r.offset): o.label for _, r in writes(o)}


def _replay(ops: list[Op]) -> dict[str, list[str]]:
    """op label -> the producer of each buffer it reads (weights and states left out)."""
    last: dict[tuple[str, int], str] = {}
    out: dict[str, list[str]] = {}
    for o in ops:
        out[o.label] = [last.get((r.buf, r.offset), "<input>") for r in reads(o)
                        if r.buf and not r.buf.startswith("model.")]
        last.update(_replaced_writes(o))
    return out


@pytest.mark.parametrize("prog", ["decode", "verify"])
def test_fused_program_reads_what_the_unfused_one_read(programs, prog):
    cfg, progs = programs
    plain = progs[prog]
    fused = fuse_program(plain)
    dropped = len(plain.ops) - len(fused.ops)
    assert dropped == cfg.layers * (1 if prog == "decode" else 4)
    before, after = _replay(plain.ops), _replay(fused.ops)
    kept = [o.label for o in fused.ops if o.kind not in ("gemm_silu", "gemm_split")]
    assert len(kept) > 5 * cfg.layers
    for label in kept:
        assert after[label] == before[label], label
    # a fused op reads its input from the producer the GEMMs it replaces read it from
    for o in fused.ops:
        layer = o.label.split(".")[0]
        if o.kind == "gemm_silu":
            part = "gate_up_proj" if prog == "decode" else "gate_proj"
            assert after[o.label] == before[f"{layer}.mlp.{part}"], o.label
        elif o.kind == "gemm_split":
            assert after[o.label] == before[f"{layer}.self_attn.q_proj"], o.label
    # the dropped up projections' buffers and the captured SiLU kernel are gone
    assert not any(o.label.endswith("silu_mul") for o in fused.ops)


# ---------------------------------------------------------------- synthetic programs

K = 16
W = "model.layers.0.w.weight"


def _gemm(label: str, a: str, c: Ref | str, n: int, row: int, buf: str = W) -> Op:
    c = Ref(buf=c) if isinstance(c, str) else c
    return Op("gemm", label, args={"a": Ref(buf=a), "w": Ref(buf=buf, offset=2 * row * K),
                                   "c": c, "n": n, "k": K})


def _mined(label: str, **ptrs: tuple[str, Ref | str]) -> Op:
    return Op("mined", label, ptrs={i: (d, Ref(buf=r) if isinstance(r, str) else r)
                                    for i, (d, r) in enumerate(ptrs.values())})


def _embed() -> Op:
    return _mined("embed", ids=("in", TOKEN_IDS), out=("out", "x"))


def _silu(gate: Ref | str = "g", up: Ref | str = "u") -> Op:
    return _mined("L0.silu_mul", gate=("inout", gate), up=("in", up))


def _down(src: str = "g") -> Op:
    return _mined("L0.down", a=("in", src), out=("out", "y"))


def _dynamic(*middle: Op, tail: tuple[Op, ...] = ()) -> Program:
    """x -> q/k/v GEMMs -> a reader of the three; x -> gate/up GEMMs -> SiLU -> down."""
    ops = [_embed(), _gemm("L0.self_attn.q_proj", "x", "q", 32, 0),
           _gemm("L0.self_attn.k_proj", "x", "kb", 16, 32),
           _gemm("L0.self_attn.v_proj", "x", "vb", 16, 48),
           _mined("L0.attn", q=("in", "q"), k=("in", "kb"), v=("in", "vb"), out=("out", "o")),
           _gemm("L0.mlp.gate_proj", "x", "g", 32, 64), *middle,
           _gemm("L0.mlp.up_proj", "x", "u", 32, 96), _silu(), _down(), *tail]
    return Program("verify", TOK, ops, {})


def test_dynamic_program_gets_both_fusions():
    out = fuse_program(_dynamic())
    assert [o.kind for o in out.ops] == ["mined", "gemm_split", "mined", "gemm_silu", "mined"]
    split, silu = out.ops[1], out.ops[3]
    assert (split.args["c0"], split.args["c1"], split.args["c2"]) == (
        Ref(buf="q"), Ref(buf="kb"), Ref(buf="vb"))
    assert (split.args["n0"], split.args["n1"], split.args["n2"]) == (32, 16, 16)
    assert split.args["w"] == Ref(buf=W) and split.label == "L0.self_attn.qkv_split"
    assert silu.args == {"a": Ref(buf="x"), "w": Ref(buf=W, offset=2 * 64 * K),
                         "c": Ref(buf="g"), "n": 32, "k": K}
    assert silu.label == "L0.mlp.gate_up_silu"


def _decode(gate: Ref, up: Ref, rows=1) -> Program:
    ops = [_embed(), _gemm("L0.mlp.gate_up_proj", "x", "gu", 64, 0), _silu(gate, up),
           _down("gu")]
    return Program("decode", rows, ops, {})


def test_merged_gate_up_in_one_row_program():
    out = fuse_program(_decode(Ref(buf="gu"), Ref(buf="gu", offset=64)))
    assert [o.kind for o in out.ops] == ["mined", "gemm_silu", "mined"]
    assert out.ops[1].args["c"] == Ref(buf="gu") and out.ops[1].args["n"] == 32


@pytest.mark.parametrize("program,match", [
    (lambda: _decode(Ref(buf="gu"), Ref(buf="gu", offset=64), rows=TOK), "row stride"),
    (lambda: _decode(Ref(buf="gu"), Ref(buf="gu", offset=32)), "not the two halves"),
    (lambda: _dynamic(_mined("L0.peek", u=("in", "u"), z=("out", "z"))),
     "wrote `u`|between the gate/up GEMMs"),
    (lambda: _dynamic(_mined("L0.clobber", x=("out", "x"))), "overwrites the input"),
    (lambda: _dynamic(tail=(_mined("L0.late", u=("in", "u"), z=("out", "z")),)),
     "reads the up projection"),
])
def test_silu_preconditions_refuse(program, match):
    with pytest.raises(WiringError, match=match):
        fuse_program(program())


def _with_silu_operands(gate, up, up_row: int = 96, up_buf: str = W) -> Program:
    p = _dynamic()
    ops = [o for o in p.ops]
    i = next(j for j, o in enumerate(ops) if o.label == "L0.mlp.up_proj")
    ops[i] = _gemm("L0.mlp.up_proj", "x", "u", 32, up_row, up_buf)
    ops[i + 1] = _silu(gate, up)
    return Program("verify", TOK, ops, {})


def test_up_rows_must_follow_the_gate_rows():
    with pytest.raises(WiringError, match="contiguous rows"):
        fuse_program(_with_silu_operands("g", "u", up_row=100))
    with pytest.raises(WiringError, match="contiguous rows"):
        fuse_program(_with_silu_operands("g", "u", up_buf="model.layers.0.other.weight"))


def test_operands_must_be_the_gemm_outputs():
    with pytest.raises(WiringError, match="not exactly the outputs"):
        fuse_program(_with_silu_operands("g", Ref(buf="u", offset=16)))
    with pytest.raises(WiringError, match="not by a GEMM"):
        fuse_program(_with_silu_operands("g", "o"))
    with pytest.raises(WiringError, match="nothing before it writes"):
        fuse_program(_with_silu_operands("g", "never"))


def test_silu_pointer_directions_are_checked():
    p = _dynamic()
    ops = [(_mined("L0.silu_mul", gate=("inout", "g"), up=("inout", "u"))
            if o.label == "L0.silu_mul" else o) for o in p.ops]
    with pytest.raises(WiringError, match="expected one in-place"):
        fuse_program(Program("verify", TOK, ops, {}))


def test_split_refuses_a_reader_of_a_moved_output_in_between():
    p = _dynamic()
    ops = list(p.ops)
    ops.insert(2, _mined("L0.between", kb=("out", "kb")))
    with pytest.raises(WiringError, match="cannot move into one launch"):
        fuse_program(Program("verify", TOK, ops, {}))


def test_split_refuses_overlapping_outputs():
    p = _dynamic()
    ops = [(_gemm("L0.self_attn.v_proj", "x", Ref(buf="kb", offset=64), 16, 48)
            if o.label == "L0.self_attn.v_proj" else o) for o in p.ops]
    with pytest.raises(WiringError, match="overlapping buffers"):
        fuse_program(Program("verify", TOK, ops, {}))


def test_split_needs_whole_16_column_parts():
    """A q part of 24 columns would put q and k columns in one block: left unfused."""
    ops = [_embed(), _gemm("L0.self_attn.q_proj", "x", "q", 24, 0),
           _gemm("L0.self_attn.k_proj", "x", "kb", 16, 24),
           _gemm("L0.self_attn.v_proj", "x", "vb", 16, 40),
           _mined("L0.attn", q=("in", "q"), k=("in", "kb"), v=("in", "vb"), out=("out", "o"))]
    out = fuse_program(Program("verify", TOK, ops, {}))
    assert [o.kind for o in out.ops] == ["mined", "gemm", "gemm", "gemm", "mined"]
