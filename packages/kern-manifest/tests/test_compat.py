"""The real v2 manifest written by another implementation (Qwen3-4B from a vLLM capture)
decodes and verifies clean, and survives decode -> encode -> decode unchanged."""

from __future__ import annotations

from kern_manifest import decode, encode, load, read, verify


def test_compat_verifies_clean(compat_path):
    m = load(compat_path).manifest
    assert len(m.buffers) == 310
    assert sum(len(p.dispatches) for p in m.programs.values()) == 869
    assert verify(m) == []


def test_round_trip_compat_and_toy(compat_path, toy_path):
    for path in (compat_path, toy_path):
        m = read(path)
        again = decode(encode(m))
        assert again == m
        assert encode(again) == encode(m)


def test_verified_manifest_derives_params_and_corners(compat_path):
    vm = load(compat_path)
    assert vm.sym_min == {"tokens": 1} and vm.sym_max == {"tokens": 2048}
    assert [str(p) for p in vm.params["argmax"]] == ["in buffer<bf16>", "out buffer<i64>", "i32"]
    assert [p.abi_size for p in vm.step_params["argmax"][0]] == [8, 8, 8, 4]


def test_check_symbols(compat_path):
    import pytest

    vm = load(compat_path)
    vm.check_symbols({"tokens": 2048})
    with pytest.raises(ValueError, match=r"`tokens` = 2049 is outside \[1, 2048\]"):
        vm.check_symbols({"tokens": 2049})
    with pytest.raises(ValueError, match="unknown symbol `batch`"):
        vm.check_symbols({"tokens": 1, "batch": 1})
