import json
import struct

import kern_manifest as km
import pytest
from kern_manifest import ExprNode

from krt_helpers import EXAMPLES
from kern_runtime.errors import CallerError
from kern_runtime.launchplan import (BoundExtern, BoundKernel, bind, check_symbols,
                                     compile_program, graph_key, needs_shared_optin,
                                     shared_mem_max)
from kern_runtime.memory_plan import REGION_ALIGN, plan_memory


def toy_obj():
    return json.loads((EXAMPLES / "toy" / "manifest.json").read_text())


def vm_of(obj):
    return km.check(km.from_obj(obj))


def test_plan_toy_alignment_and_sizes():
    vm = vm_of(toy_obj())
    plan = plan_memory(vm, capacity=100)
    regions = plan.regions()
    assert [r.kind for r in regions] == ["buffer", "state", "buffer", "buffer", "buffer", "scratch"]
    assert regions[0].name == "gamma"  # weights first
    for r in regions:
        assert r.offset % REGION_ALIGN == 0
    for a, b in zip(regions, regions[1:]):
        assert a.offset + a.nbytes <= b.offset
    assert plan.buffers["x"].nbytes == 256 * 128 * 2       # input at tokens max
    assert plan.buffers["y"].nbytes == 256 * 4
    assert plan.states["cache"].nbytes == 512 * 100
    assert plan.scratch[("energy", "part")].nbytes == 256 * 4 * 4
    assert plan.total >= regions[-1].offset + regions[-1].nbytes
    totals = plan.class_totals()
    assert totals["weight"] == (1, 256)
    assert totals["state"] == (1, 51200)
    assert totals["scratch"] == (1, 4096)


def test_plan_capacity_required_and_validated():
    vm = vm_of(toy_obj())
    with pytest.raises(CallerError, match="capacity") as e:
        plan_memory(vm, None)
    assert "`cache`" in str(e.value)
    for bad in (0, -3, 1.5, True):
        with pytest.raises(CallerError):
            plan_memory(vm, bad)


def test_plan_state_alignment_and_fixed():
    obj = toy_obj()
    obj["states"]["cache"]["align"] = 4096
    obj["states"]["rec"] = {"bytes_fixed": 1000}
    obj["buffers"]["y2"] = {"dtype": "f32", "shape": ["tokens"], "class": "output"}
    # use the new state and buffer so the manifest verifies
    obj["programs"]["step"]["dispatches"].append(
        {"kernel": "energy", "args": [{"buf": "h"}, {"state": "rec"}, {"buf": "y2"}, {"i32": 1}]})
    vm = vm_of(obj)
    plan = plan_memory(vm, capacity=3)
    assert plan.align == 4096
    assert plan.states["cache"].offset % 4096 == 0
    assert plan.states["rec"].nbytes == 1000
    addr = plan.addresses(0x10000)
    assert addr.states["cache"] % 4096 == 0
    with pytest.raises(ValueError):
        plan.addresses(0x10100)


FAKE_BASE = 0x7F00_0000_0000


def compiled(obj, capacity=64):
    vm = vm_of(obj)
    plan = plan_memory(vm, capacity)
    addr = plan.addresses(FAKE_BASE)
    return vm, plan, addr, compile_program(vm, "step", plan, addr)


def test_compile_and_bind_toy():
    vm, plan, addr, ts = compiled(toy_obj())
    assert [(t.dispatch, t.kernel, t.step, t.symbol) for t in ts] == [
        (0, "norm", 0, "toy_rms_norm"), (1, "energy", 0, "toy_partial"),
        (1, "energy", 1, "toy_reduce")]
    assert all(t.symbolic for t in ts)
    b0 = bind(ts[0], {"tokens": 5})
    assert isinstance(b0, BoundKernel)
    assert b0.grid == (5, 1, 1) and b0.block == (128, 1, 1) and b0.shared_mem == 0
    assert b0.args.slot(0) == struct.pack("<Q", addr.buffers["x"])
    assert b0.args.slot(1) == struct.pack("<Q", addr.buffers["gamma"])
    assert b0.args.slot(2) == struct.pack("<Q", addr.buffers["h"])
    assert b0.args.slot(3) == struct.pack("<i", 5)
    b1 = bind(ts[1], {"tokens": 5})
    assert b1.grid == (5, 4, 1)
    assert b1.args.slot(1) == struct.pack("<Q", addr.states["cache"] + 256)  # state offset
    assert b1.args.slot(2) == struct.pack("<Q", addr.scratch[("energy", "part")])
    # interface arg 3 (an expr, mul(tokens,128)) is forwarded to the first step
    assert b1.args.slot(3) == struct.pack("<i", 640)
    b2 = bind(ts[2], {"tokens": 200})
    assert b2.grid == (2, 1, 1) and b2.shared_mem == 2048
    assert b2.args.slot(0) == struct.pack("<Q", addr.scratch[("energy", "part")])
    assert b2.args.slot(1) == struct.pack("<Q", addr.buffers["y"])
    assert b2.args.slot(2) == struct.pack("<i", 4)  # impl literal
    assert "program `step` dispatch 1 (`energy`)" in ts[2].where
    assert "kernel `energy` step 1 (`toy_reduce`)" in ts[2].where
    assert shared_mem_max(vm, "energy", 1) == 2048
    assert shared_mem_max(vm, "norm", 0) == 0


def test_scratch_offset_and_literals_forwarded():
    obj = toy_obj()
    st = obj["kernels"]["energy"]["impl"]["steps"]
    st[0]["args"][2] = {"scratch": "part", "offset": 512}
    st[1]["args"][0] = {"scratch": "part", "offset": 512}
    obj["kernels"]["energy"]["impl"]["scratch"]["part"]["shape"] = [64, 8]
    obj["programs"]["step"]["dispatches"][1]["args"][3] = {"i32": -7}
    vm, plan, addr, ts = compiled(obj)
    b1 = bind(ts[1], {"tokens": 1})
    assert b1.args.slot(2) == struct.pack("<Q", addr.scratch[("energy", "part")] + 512)
    assert b1.args.slot(3) == struct.pack("<i", -7)
    assert bind(ts[2], {"tokens": 1}).args.slot(0) == b1.args.slot(2)


def test_state_offset_beyond_capacity_is_refused():
    obj = toy_obj()
    obj["programs"]["step"]["dispatches"][1]["args"][1]["offset"] = 4096
    vm = vm_of(obj)
    plan = plan_memory(vm, 8)  # 512 * 8 = 4096 bytes: offset 4096 is outside
    with pytest.raises(CallerError, match="capacity 8") as e:
        compile_program(vm, "step", plan, plan.addresses(FAKE_BASE))
    assert "program `step` dispatch 1 (`energy`)" in str(e.value)
    plan = plan_memory(vm, 9)
    compile_program(vm, "step", plan, plan.addresses(FAKE_BASE))


def gemm_obj():
    return {
        "meta": {"version": 2, "model": "gemm"},
        "symbols": {"m": {"max": 8}},
        "buffers": {
            "a": {"dtype": "bf16", "shape": ["m", 64], "class": "input"},
            "w": {"dtype": "bf16", "shape": [32, 64], "class": "weight"},
            "c": {"dtype": "bf16", "shape": ["m", 32], "class": "output"},
        },
        "kernels": {"gemm": {
            "params": ["in buffer<bf16>", "in buffer<bf16>", "out buffer<bf16>", "i32", "i32", "i32"],
            "impl": {"steps": [{
                "symbol": "extern:cublaslt_bf16_tn",
                "params": ["in buffer<bf16>", "in buffer<bf16>", "out buffer<bf16>", "i32", "i32", "i32"],
                "block": [1, 1, 1], "grid": [1, 1, 1],
                "args": [{"arg": 0}, {"arg": 1}, {"arg": 2}, {"arg": 3}, {"arg": 4}, {"arg": 5}]}]}}},
        "programs": {"step": {"dispatches": [{"kernel": "gemm", "args": [
            {"buf": "a"}, {"buf": "w"}, {"buf": "c"}, {"sym": "m"}, {"i32": 32}, {"i32": 64}]}]}},
    }


def test_bind_extern():
    vm, plan, addr, ts = compiled(gemm_obj())
    (t,) = ts
    assert t.is_extern
    b = bind(t, {"m": 3})
    assert isinstance(b, BoundExtern)
    assert (b.m, b.n, b.k) == (3, 32, 64)
    assert (b.a, b.w, b.c) == (addr.buffers["a"], addr.buffers["w"], addr.buffers["c"])
    assert not b.accumulate


def test_check_symbols():
    vm = vm_of(toy_obj())
    assert check_symbols(vm, {"tokens": 256}, "step") == {"tokens": 256}
    for bad, msg in (({"tokens": 257}, "outside"), ({"tokens": 0}, "outside"), ({}, "needs a value"),
                     ({"tokens": 3, "x": 1}, "unknown symbol"), ({"tokens": 2.0}, "integer"),
                     ({"tokens": True}, "integer")):
        with pytest.raises(CallerError, match=msg) as e:
            check_symbols(vm, bad, "step")
        assert "program `step`" in str(e.value)
        assert str(e.value).startswith("[caller]")


def test_graph_key():
    assert graph_key("decode", {"b": 2, "a": 1}) == ("decode", (("a", 1), ("b", 2)))
    assert graph_key("decode", {"a": 1, "b": 2}) == graph_key("decode", {"b": 2, "a": 1})
    assert graph_key("decode", {"a": 1}) != graph_key("decode", {"a": 2})
    assert graph_key("decode", {"a": 1}) != graph_key("prefill", {"a": 1})
    assert isinstance(ExprNode(sym="a"), ExprNode)


@pytest.mark.parametrize("static,dynamic,optin", [
    (0, 0, False), (16384, 0, False), (0, 49152, False), (0, 49153, True),
    (16384, 32768, False), (16384, 40960, True), (8192, 73728, True)])
def test_the_shared_memory_optin_counts_static_and_dynamic(static, dynamic, optin):
    """48 KiB bounds a block's static + dynamic shared memory without the opt-in: a SiLU GEMV
    with 16 KiB static and 40 KiB dynamic failed to launch without it (session 28)."""
    assert needs_shared_optin(static, dynamic) is optin
