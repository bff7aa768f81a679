"""The toy manifest of manifest-v2.md verifies clean; every mutation the spec lists fails
with the expected code at the expected path, and nothing else."""

from __future__ import annotations

import json

DISPATCHES = "programs.step.dispatches"
NORM_STEP = "kernels.norm.impl.steps[0]"


def test_toy_is_clean(toy, pairs):
    assert pairs(toy) == set()


def test_swap_dispatches_reads_before_write(toy, pairs):
    d = toy["programs"]["step"]["dispatches"]
    d[0], d[1] = d[1], d[0]
    assert pairs(toy) == {("E0701", f"{DISPATCHES}[0].args[0]")}


def test_drop_second_dispatch(toy, pairs):
    toy["programs"]["step"]["dispatches"].pop()
    assert pairs(toy) == {
        ("E0703", "buffers.y"), ("E0801", "states.cache"), ("E0801", "kernels.energy")}


def test_h_as_f32_is_a_dtype_mismatch(toy, pairs):
    toy["buffers"]["h"]["dtype"] = "f32"
    assert pairs(toy) == {("E0604", f"{DISPATCHES}[0].args[2]"),
                          ("E0604", f"{DISPATCHES}[1].args[0]")}


def test_unused_buffer(toy, pairs):
    toy["buffers"]["spare"] = {"dtype": "u8", "shape": [4], "class": "workspace"}
    assert pairs(toy) == {("E0801", "buffers.spare")}


def test_ceil_div_by_zero_in_grid(toy, pairs):
    toy["kernels"]["norm"]["impl"]["steps"][0]["grid"][0] = {"ceil_div": [{"sym": "tokens"}, 0]}
    assert pairs(toy) == {("E0006", f"{NORM_STEP}.grid[0].ceil_div[1]")}


def test_block_too_large(toy, pairs):
    toy["kernels"]["norm"]["impl"]["steps"][0]["block"] = [1024, 2, 1]
    assert pairs(toy) == {("E0401", f"{NORM_STEP}.block")}


def test_param_without_direction(toy, pairs):
    toy["kernels"]["norm"]["params"][0] = "buffer<bf16>"
    assert pairs(toy) == {("E0007", "kernels.norm.params[0]")}


def test_buffer_to_ptr_param(toy, pairs):
    toy["programs"]["step"]["dispatches"][1]["args"][1] = {"buf": "h"}
    assert pairs(toy) == {("E0603", f"{DISPATCHES}[1].args[1]"), ("E0801", "states.cache")}


def test_misaligned_offset(toy, pairs):
    toy["programs"]["step"]["dispatches"][1]["args"][0] = {"buf": "h", "offset": 3}
    assert pairs(toy) == {("E0607", f"{DISPATCHES}[1].args[0].offset")}


def test_offset_outside_buffer(toy, pairs):
    toy["programs"]["step"]["dispatches"][1]["args"][0] = {"buf": "h", "offset": 65536}
    assert pairs(toy) == {("E0608", f"{DISPATCHES}[1].args[0].offset")}


def test_sha256_without_cubin(toy, pairs):
    del toy["kernels"]["norm"]["impl"]["steps"][0]["cubin"]
    assert pairs(toy) == {("E0406", f"{NORM_STEP}.sha256")}


def test_unknown_key_in_argument(toy, pairs):
    toy["programs"]["step"]["dispatches"][1]["args"][0] = {"buf": "h", "offest": 8}
    assert pairs(toy) == {("E0004", f"{DISPATCHES}[1].args[0].offest")}


def test_duplicate_key_in_buffers(toy, pairs):
    text = json.dumps(toy).replace(
        '"buffers": {', '"buffers": {"x": {"dtype": "u8", "shape": [1], "class": "input"}, ', 1)
    assert pairs(text) == {("E0003", "buffers.x")}


def test_label_appears_in_message(toy, diagnose):
    toy["buffers"]["h"]["dtype"] = "f32"
    messages = [d.message for d in diagnose(toy)]
    assert any("(dispatch `energy`)" in m for m in messages)
    assert any("(dispatch `norm`)" in m for m in messages)
