"""The caller contract (``kern_manifest.contract``): both generated examples meet it, and a
manifest that breaks it is refused with every deviation listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kern_manifest import KernError, from_obj, load
from kern_manifest.contract import (ANY, BATCH, BLOCK_TABLE, DECODE, INPUTS, NEXT_TOKEN,
                                    OUTPUTS, PAGE_TOKENS, POS0, PREFILL, STATE, SYMBOL,
                                    ContractError, check_batch, check_manifest)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.mark.parametrize("example,vocab", [("smollm2-135m", 49152), ("qwen3-4b", 151936)])
def test_examples_meet_the_contract(example, vocab):
    vm = load(EXAMPLES / example / "manifest.json")          # verified first
    info = check_manifest(vm.manifest)
    m = vm.manifest
    assert (info.max_tokens, info.vocab) == (2048, vocab)
    # per-token states (one per layer's K and V): the caller picks the capacity
    assert info.kv_bytes_per_token == sum(st.bytes_per_token for st in m.states.values()) > 0
    assert info.kv_bytes_fixed == 0 and info.context is None
    assert info.position_limit == m.buffers["positions"].domain.max + 1
    for name, (dtype, shape) in (INPUTS | OUTPUTS).items():
        have = [info.table_pages if d == ANY else d for d in shape]
        assert (m.buffers[name].dtype, list(m.buffers[name].shape)) == (dtype, have), name
    # the table addresses every position below the limit, in whole pages
    assert info.table_pages == -(-info.position_limit // PAGE_TOKENS)
    assert m.buffers[BLOCK_TABLE].domain.unit == PAGE_TOKENS
    assert {PREFILL, DECODE, BATCH} <= set(m.programs) and set(m.symbols) == {SYMBOL}
    check_batch(m)


def test_a_manifest_without_batch_is_refused_for_the_engine():
    doc = json.loads((EXAMPLES / "smollm2-135m" / "manifest.json").read_text())
    del doc["programs"][BATCH]
    with pytest.raises(ContractError, match="the engine needs a program `batch`"):
        check_batch(from_obj(doc))


def test_a_table_that_is_not_two_dimensional_is_refused():
    doc = json.loads((EXAMPLES / "smollm2-135m" / "manifest.json").read_text())
    doc["buffers"][BLOCK_TABLE]["shape"] = ["tokens"]
    doc["buffers"][BLOCK_TABLE]["domain"] = {"min": 0}
    with pytest.raises(ContractError) as e:
        check_manifest(from_obj(doc))
    assert e.value.problems[-1].endswith("buffer `block_table` is input i32['tokens']; the "
                                         "contract needs input i32['tokens', <P>]")


def test_a_broken_manifest_is_refused_with_every_deviation():
    doc = json.loads((EXAMPLES / "smollm2-135m" / "manifest.json").read_text())
    doc["programs"]["step"] = doc["programs"].pop(DECODE)
    doc["buffers"][POS0]["dtype"] = "i64"
    doc["buffers"][NEXT_TOKEN]["class"] = "workspace"
    doc["symbols"]["batch"] = {"min": 1, "max": 4}
    doc["buffers"]["seq_lens"] = {"dtype": "i32", "shape": [1], "class": "input"}
    with pytest.raises(ContractError) as e:
        check_manifest(from_obj(doc))
    model = doc["meta"]["model"]
    assert e.value.problems == [f"manifest `{model}`: {p}" for p in [
        "manifest declares symbols the caller cannot set: `batch` (the contract has only "
        "`tokens`)",
        "manifest declares no program `decode`",
        "buffer `pos0` is input i64[1]; the contract needs input i32[1]",
        "buffer `next_token` is workspace i64['tokens']; the contract needs output "
        "i64['tokens']",
        "manifest declares input buffers the caller does not write: `seq_lens` (the "
        "contract's inputs are `token_ids`, `positions`, `slots`, `pos0`, `kv_lens`, "
        "`block_table`)"]]
    assert isinstance(e.value, KernError) and e.value.exit_code == 2
    assert str(e.value) == "\n".join(e.value.problems)


@pytest.mark.parametrize("example", ["smollm2-135m", "qwen3-4b"])
def test_examples_carry_speculations_verify(example):
    from kern_manifest.contract import VERIFY_MAX, check_verify
    vm = load(EXAMPLES / example / "manifest.json")
    assert check_verify(vm.manifest) == VERIFY_MAX == 16      # tokens.max 1024 > 16


def test_a_manifest_without_verify_is_refused_for_speculation():
    from kern_manifest.contract import check_verify
    doc = json.loads((EXAMPLES / "smollm2-135m" / "manifest.json").read_text())
    del doc["programs"]["verify"]
    doc["buffers"]["predictions"]["dtype"] = "i32"
    with pytest.raises(ContractError) as ei:
        check_verify(from_obj(doc))
    p = ei.value.problems
    assert len(p) == 2 and "--spec needs a program `verify`" in p[0]
    assert "buffer `predictions` is output i32['tokens']" in p[1]
