from pathlib import Path

import pytest
from kern_manifest import check, from_obj, read, verify
from kern_manifest.contract import check_manifest

from kern_run.bench.gemm_only import decode_symbols, gemm_only
from kern_run.errors import ContractError
from krun_fakes import contract_manifest

COMPAT = Path(__file__).parents[3] / "tests" / "fixtures" / "compat" / "qwen3-4b.json"


def test_conforming_manifest():
    info = check_manifest(from_obj(contract_manifest(max_tokens=64, vocab=321)))
    assert (info.max_tokens, info.vocab, info.kv_bytes_per_token) == (64, 321, 64)


def test_fixed_state_gives_the_context():
    doc = contract_manifest(max_tokens=64, vocab=321)
    assert check_manifest(from_obj(doc)).context is None
    doc["states"]["kv"] = {"bytes_fixed": 4096}
    info = check_manifest(from_obj(doc))
    assert (info.kv_bytes_per_token, info.kv_bytes_fixed, info.context) == (0, 4096, 64)


def test_every_deviation_is_listed():
    doc = contract_manifest(extra_inputs=["seq_lens"])
    doc["buffers"]["pos0"]["dtype"] = "i64"
    del doc["programs"]["prefill"]
    with pytest.raises(ContractError) as ei:
        check_manifest(from_obj(doc))
    text = str(ei.value)
    assert "no program `prefill`" in text
    assert "buffer `pos0` is input i64[1]; the contract needs input i32[1]" in text
    assert "input buffers the caller does not write: `seq_lens`" in text


@pytest.mark.skipif(not COMPAT.is_file(), reason="compat fixture absent")
def test_older_generator_manifest_is_refused_by_name():
    with pytest.raises(ContractError) as ei:
        check_manifest(read(COMPAT))
    text = str(ei.value)
    assert "no input buffer `pos0`" in text
    assert "`slot_mapping`" in text and "`block_table`" in text


@pytest.mark.skipif(not COMPAT.is_file(), reason="compat fixture absent")
def test_gemm_only_manifest_of_a_real_decode_verifies():
    m = read(COMPAT)
    doc = gemm_only(m)
    assert verify(from_obj(doc)) == []
    (prog,) = doc["programs"].values()
    n_gemm = sum(1 for d in m.programs["decode"].dispatches
                 if all(s.is_extern for s in m.kernels[d.kernel].impl.steps))
    assert len(prog["dispatches"]) == n_gemm == 36 * 4 + 1
    # the same weights, bound by the same names
    ws = {n for n, b in doc["buffers"].items() if b["class"] == "weight"}
    assert ws and ws <= {n for n, b in m.buffers.items() if b.cls == "weight"}
    assert not doc.get("states")


@pytest.mark.parametrize("example", ["smollm2-135m", "qwen3-4b"])
def test_gemm_only_manifest_of_each_example_runs_with_the_symbols_bench_passes(example):
    """`kern-run bench` times the GEMM-only program with `decode_symbols`: the runtime's own
    symbol check must accept them (the examples' decode shapes are fixed, so the GEMM-only
    manifest declares no symbol and `tokens` would be refused: the H200 run of 2026-11-30)."""
    path = Path(__file__).resolve().parents[3] / "examples" / example / "manifest.json"
    doc = gemm_only(read(path))
    vm = check(from_obj(doc))
    vm.check_symbols(decode_symbols(doc))
    with pytest.raises(ValueError, match="unknown symbol `tokens`"):
        vm.check_symbols({"tokens": 1})
    per_layer = {"smollm2-135m": 30, "qwen3-4b": 36}[example]
    # merged projections: qkv, o, gate_up, down per layer, and lm_head
    assert len(doc["programs"]["gemms"]["dispatches"]) == per_layer * 4 + 1
