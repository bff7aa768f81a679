"""Merged projections (``kern_gen.llama.merge``): on both committed captures, the decode
program with one GEMM per merged weight computes what the captured wiring computes -- every
kernel argument reads the value the same producer wrote (a symbolic dataflow replay over
buffers and byte offsets) -- and prefill reads each part's weight as a view at its first row;
the merge refuses unaligned parts."""

from __future__ import annotations

from pathlib import Path

import pytest
from kg_own import wiring_inputs

from kern_gen.llama import WiringError
from kern_gen.llama import merge as M
from kern_gen.llama.command import PRESETS
from kern_gen.llama.ir import Op, Program, Ref, reads, writes
from kern_gen.llama.programs import PROGRAMS

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module", params=[p for p in ("llama", "qwen3")
                                        if (ROOT / PRESETS[p][0]).is_dir()])
def wired(request, tmp_path_factory):
    _, cfg, g = wiring_inputs(request.param, tmp_path_factory.mktemp("mined"))
    return (cfg, PROGRAMS["decode"](g), PROGRAMS["prefill"](g))


def _args(o: Op) -> list[tuple[str, Ref]]:
    return [(str(p), r) for p, (_, r) in o.ptrs.items()] + \
        [(k, v) for k, v in o.args.items() if isinstance(v, Ref)]


def _replay(ops: list[Op], fused: dict[str, list[tuple[int, str]]]) -> list[tuple]:
    last: dict[tuple[str, int], str] = {}
    out = []
    for o in ops:
        if o.kind == "gemm" and o.label in fused:
            for off, part in fused[o.label]:
                last[(o.args["c"].buf, off)] = part
            continue
        for key, r in _args(o):
            if r.buf and not r.buf.startswith("model.") and r in reads(o):
                out.append((o.label, key, last.get((r.buf, r.offset), "<input>")))
        for d, r in writes(o):
            last[(r.buf, r.offset)] = o.label
    return out


def test_decode_merge_keeps_every_producer(wired):
    cfg, dec, _ = wired
    merged = M.merge_gemms(dec, cfg)
    fused = {}
    for o in merged.ops:
        if o.kind == "gemm" and o.label.endswith(("qkv_proj", "gate_up_proj")):
            layer, name = o.label.split(".", 1)
            parts = dict(M.MERGES)[name]
            offs, n = [], 0
            for p in parts:
                offs.append((2 * n, f"{layer}.{p}"))
                n += M._rows(cfg, p)
            assert n == o.args["n"]
            fused[o.label] = offs
    assert len(fused) == 2 * cfg.layers
    before = [x for x in _replay(dec.ops, {}) if not x[0].endswith(("_proj",))]
    after = [x for x in _replay(merged.ops, fused) if not x[0].endswith(("_proj",))]
    assert after == before and len(before) > 5 * cfg.layers
    # the GEMMs that stay read what they read before; the fused ones read the parts' A
    gb = {o.label: _replay_one(dec.ops, o.label) for o in dec.ops if o.kind == "gemm"}
    for o in merged.ops:
        if o.kind != "gemm":
            continue
        if o.label in fused:
            first = fused[o.label][0][1]
            assert _replay_one(merged.ops, o.label, fused)["a"] == gb[first]["a"]
        else:
            assert _replay_one(merged.ops, o.label, fused) == gb[o.label]
    n_gemm = sum(o.kind == "gemm" for o in merged.ops)
    assert n_gemm == 4 * cfg.layers + 1 == sum(o.kind == "gemm" for o in dec.ops) - 3 * cfg.layers
    w = {o.args["w"].buf for o in merged.ops if o.kind == "gemm"}
    assert "model.layers.3.self_attn.qkv_proj.weight" in w and \
        "model.layers.3.mlp.gate_up_proj.weight" in w


def _replay_one(ops, label, fused=None):
    last: dict[tuple[str, int], str] = {}
    fused = fused or {}
    for o in ops:
        if o.label == label:
            return {k: last.get((r.buf, r.offset), "<input>") for k, r in o.args.items()
                    if isinstance(r, Ref) and k == "a"}
        if o.kind == "gemm" and o.label in fused:
            for off, part in fused[o.label]:
                last[(o.args["c"].buf, off)] = part
            continue
        for d, r in writes(o):
            last[(r.buf, r.offset)] = o.label
    raise AssertionError(label)


def test_prefill_reads_weight_views(wired):
    cfg, _, pre = wired
    viewed = M.view_weights(pre, cfg)
    assert [o.label for o in viewed.ops] == [o.label for o in pre.ops]
    parts = M.merged_weights(cfg)
    got = {}
    for a, b in zip(pre.ops, viewed.ops):
        if a.kind != "gemm":
            assert a == b
            continue
        wa, wb = a.args["w"], b.args["w"]
        if wb.buf == wa.buf:
            assert not wa.buf.endswith(tuple(f"{p}.weight" for _, ps in M.MERGES for p in ps))
            continue
        row = dict(parts[wb.buf])[wa.buf]
        assert wb.offset == 2 * row * a.args["k"]
        got[wa.buf] = (wb.buf, wb.offset)
    D, K = cfg.hidden, 2 * cfg.hidden
    assert got["model.layers.5.self_attn.k_proj.weight"] == (
        "model.layers.5.self_attn.qkv_proj.weight", cfg.q_width * K)
    assert got["model.layers.5.self_attn.v_proj.weight"] == (
        "model.layers.5.self_attn.qkv_proj.weight", (cfg.q_width + cfg.kv_width) * K)
    assert got["model.layers.5.mlp.up_proj.weight"] == (
        "model.layers.5.mlp.gate_up_proj.weight", cfg.intermediate * K)
    # prefill ends at the last layer's V-cache write: no gate/up in the last layer
    assert len(got) == 5 * cfg.layers - 2 and D > 0


def _toy(n_q: int, n_kv: int, overwrite_a: bool = False) -> Program:
    def gemm(part, n, c):
        return Op("gemm", f"L0.self_attn.{part}", None, args={
            "a": Ref(buf="x"), "w": Ref(buf=f"model.layers.0.self_attn.{part}.weight"),
            "c": Ref(buf=c), "n": n, "k": 64})
    ops = [Op("mined", "norm", None, ptrs={0: ("out", Ref(buf="x"))}),
           gemm("q_proj", n_q, "q"), gemm("k_proj", n_kv, "k")]
    if overwrite_a:
        ops.append(Op("mined", "clobber", None, ptrs={0: ("out", Ref(buf="x"))}))
    ops += [gemm("v_proj", n_kv, "v"),
            Op("mined", "use", None, ptrs={0: ("in", Ref(buf="q")), 1: ("in", Ref(buf="k")),
                                           2: ("in", Ref(buf="v"))})]
    return Program("decode", 1, ops, {})


class _Cfg:
    layers, hidden, intermediate = 1, 64, 128

    def __init__(self, q: int, kv: int) -> None:
        self.q_width, self.kv_width = q, kv


def test_toy_merge_and_refusals():
    out = M._merge_one("decode", _toy(64, 32).ops, {}, _Cfg(64, 32), 0, *M.MERGES[0])
    assert [o.label for o in out] == ["norm", "L0.self_attn.qkv_proj", "use"]
    use = out[-1].ptrs
    assert [(r.buf, r.offset) for _, r in use.values()] == [
        ("decode.L0.qkv_proj.out", 0), ("decode.L0.qkv_proj.out", 128),
        ("decode.L0.qkv_proj.out", 192)]
    with pytest.raises(WiringError, match=r"part byte offsets \[0, 132, 196\] are not all "
                                          r"multiples of 16"):
        M._merge_one("decode", _toy(66, 32).ops, {}, _Cfg(66, 32), 0, *M.MERGES[0])
    with pytest.raises(WiringError, match="`clobber` overwrites the shared input `x`"):
        M._merge_one("decode", _toy(64, 32, overwrite_a=True).ops, {}, _Cfg(64, 32), 0,
                     *M.MERGES[0])
    with pytest.raises(WiringError, match="0 GEMMs labelled `L0.mlp.gate_proj`"):
        M._merge_one("decode", _toy(64, 32).ops, {}, _Cfg(64, 32), 0, *M.MERGES[1])
