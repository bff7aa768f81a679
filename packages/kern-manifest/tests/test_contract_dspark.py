"""``check_dspark`` (docs/dspark.md): a DSpark manifest made from the SmolLM2 example passes,
and each deviation the caller relies on is refused with its own problem line."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kern_manifest import from_obj
from kern_manifest.contract import (CARRY, DECODE_SPEC, DRAFT, DRAFT_PRECOMPUTE, DRAFT_TOKENS,
                                    NEXT_DRAFT_KV_LENS, NEXT_INPUTS, NEXT_POSITIONS,
                                    NEXT_TOKEN_IDS, NEXT_VERIFY_KV_LENS, VERIFY,
                                    DSPARK_PROGRAMS, VERIFY_MAX, ContractError, check_dspark,
                                    check_manifest)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
BASE = json.loads((EXAMPLES / "smollm2-135m" / "manifest.json").read_text())


def dspark_doc(layers: int = 2) -> dict:
    """The SmolLM2 example plus what docs/dspark.md adds (programs copied from decode: the
    check reads names, shapes and states, not dispatches)."""
    doc = copy.deepcopy(BASE)
    per = doc["states"]["kv.L0.k"]["bytes_per_token"]
    for j in range(layers):
        for kv in "kv":
            doc["states"][f"draft.kv.L{j}.{kv}"] = {"bytes_per_token": per}
    doc["buffers"][CARRY] = {"dtype": "bf16", "shape": ["tokens", 576], "class": "carry"}
    doc["buffers"][DRAFT_TOKENS] = {"dtype": "i64", "shape": [7], "class": "output"}
    doc["buffers"]["draft.norm.weight"] = {"dtype": "bf16", "shape": [576], "class": "weight"}
    for p in (DECODE_SPEC, DRAFT, DRAFT_PRECOMPUTE):
        doc["programs"][p] = copy.deepcopy(doc["programs"]["decode"])
    return doc


def problems(doc: dict) -> list[str]:
    with pytest.raises(ContractError) as ei:
        check_dspark(from_obj(doc))
    model = doc["meta"]["model"]
    assert all(p.startswith(f"manifest `{model}`: ") for p in ei.value.problems)
    return [p.split(": ", 1)[1] for p in ei.value.problems]


def test_a_dspark_manifest_passes_and_reports_what_the_caller_needs():
    doc = dspark_doc(layers=3)
    m = from_obj(doc)
    check_manifest(m)                     # still a plain caller-contract manifest
    info = check_dspark(m)
    assert (info.layers, info.hidden, info.verify_max) == (3, 576, VERIFY_MAX)
    assert info.draft_weights == ("draft.norm.weight",)


def test_the_plain_example_is_refused_with_every_missing_piece():
    got = problems(copy.deepcopy(BASE))
    assert got == [f"DSpark needs a program `{p}`" for p in (DECODE_SPEC, DRAFT,
                                                             DRAFT_PRECOMPUTE)] + [
        f"manifest declares no output buffer `{DRAFT_TOKENS}`",
        f"manifest declares no carry buffer `{CARRY}`",
        "manifest declares no draft KV states `draft.kv.L{j}.k` / `.v`"]


@pytest.mark.parametrize("program", DSPARK_PROGRAMS)
def test_each_missing_program(program):
    doc = dspark_doc()
    del doc["programs"][program]
    assert problems(doc) == [f"DSpark needs a program `{program}`"]


@pytest.mark.parametrize("field,value", [("class", "workspace"), ("dtype", "f32"),
                                         ("shape", ["tokens"]), ("shape", [8, 576]),
                                         ("shape", ["tokens", "tokens"])])
def test_a_misdeclared_carry(field, value):
    doc = dspark_doc()
    doc["buffers"][CARRY][field] = value
    [p] = problems(doc)
    assert p.startswith(f"buffer `{CARRY}` is ") and "DSpark needs carry bf16['tokens', d]" in p


@pytest.mark.parametrize("field,value,have", [("class", "workspace", "workspace i64[7]"),
                                              ("dtype", "i32", "output i32[7]"),
                                              ("shape", ["tokens"], "output i64['tokens']"),
                                              ("shape", [1], "output i64[1]")])
def test_a_misdeclared_draft_tokens(field, value, have):
    doc = dspark_doc()
    doc["buffers"][DRAFT_TOKENS][field] = value
    assert problems(doc) == [f"buffer `{DRAFT_TOKENS}` is {have}; DSpark needs output i64[B] "
                             f"(B ≥ 2: the block, a fixed size)"]


def test_predictions_are_needed():
    doc = dspark_doc()
    del doc["buffers"]["predictions"]
    assert problems(doc) == ["manifest declares no output buffer `predictions`"]


def test_draft_states_with_a_gap_or_a_missing_v():
    doc = dspark_doc(layers=3)
    del doc["states"]["draft.kv.L1.k"], doc["states"]["draft.kv.L1.v"]
    assert problems(doc) == ["draft layers 0 … 2 need both K and V states; missing "
                             "`draft.kv.L1.k`, `draft.kv.L1.v`"]
    doc = dspark_doc(layers=2)
    del doc["states"]["draft.kv.L1.v"]
    doc["states"]["draft.kv.L0.q"] = {"bytes_per_token": 384}
    assert problems(doc) == ["draft state `draft.kv.L0.q` is not named `draft.kv.L{j}.k` or "
                             "`.v`", "draft layers 0 … 1 need both K and V states; missing "
                             "`draft.kv.L1.v`"]


def test_draft_states_must_match_the_target_bytes_per_token():
    doc = dspark_doc(layers=1)
    doc["states"]["draft.kv.L0.v"] = {"bytes_per_token": 192}
    assert problems(doc) == ["draft state `draft.kv.L0.v` holds 192 bytes per token; the "
                             "target's states hold 384"]
    doc["states"]["draft.kv.L0.v"] = {"bytes_fixed": 4096}
    assert problems(doc) == ["draft state `draft.kv.L0.v` holds 0 bytes per token (a fixed "
                             "state); the target's states hold 384"]


def test_target_states_of_different_sizes_are_refused():
    doc = dspark_doc(layers=1)
    doc["states"]["kv.L0.k"] = {"bytes_per_token": 768}
    got = problems(doc)
    assert got[0].startswith("the target's KV states must be per-token states of one size")


# -- in-graph acceptance (NEXT_INPUTS) ---------------------------------------------------------
def with_acceptance(doc: dict, block: int = 7, mask: int = 5) -> dict:
    """``doc`` plus the four acceptance outputs and one verify dispatch passing them (a made-up
    kernel: the check reads names, shapes and the dispatch's literals)."""
    for name, (dtype, extra) in NEXT_INPUTS.items():
        doc["buffers"][name] = {"dtype": dtype, "shape": [block + extra], "class": "output"}
    params = ["in buffer<i64>"] + [f"out buffer<{NEXT_INPUTS[n][0]}>" for n in NEXT_INPUTS] \
        + ["i64"]
    doc["kernels"]["accept"] = {"params": params, "impl": {"steps": [{
        "symbol": "fake_accept", "params": params, "block": [32, 1, 1], "grid": [1, 1, 1],
        "args": [{"arg": i} for i in range(len(params))]}]}}
    doc["programs"][VERIFY]["dispatches"].append({"kernel": "accept", "args": [
        {"buf": "token_ids"}, *({"buf": n} for n in NEXT_INPUTS), {"i64": mask}]})
    return doc


def test_a_manifest_without_acceptance_has_no_mask():
    info = check_dspark(from_obj(dspark_doc()))
    assert info.accept_mask is None and not info.prefill_precompute


def test_the_prompts_precompute_program_is_reported():
    doc = dspark_doc()
    doc["programs"]["draft_precompute_prefill"] = copy.deepcopy(doc["programs"]["decode"])
    assert check_dspark(from_obj(doc)).prefill_precompute


def test_acceptance_reports_its_mask_token():
    assert check_dspark(from_obj(with_acceptance(dspark_doc(), mask=11))).accept_mask == 11


def test_acceptance_needs_all_four_outputs_of_their_shape():
    doc = with_acceptance(dspark_doc())
    del doc["buffers"][NEXT_DRAFT_KV_LENS]
    doc["programs"][VERIFY]["dispatches"][-1]["args"].pop(3)
    doc["kernels"]["accept"]["params"].pop(3)
    doc["kernels"]["accept"]["impl"]["steps"][0]["params"].pop(3)
    doc["kernels"]["accept"]["impl"]["steps"][0]["args"].pop()
    doc["buffers"][NEXT_POSITIONS]["shape"] = [7]
    got = problems(doc)
    assert got == [
        f"buffer `{NEXT_POSITIONS}` is output i64[7]; in-graph acceptance needs output i64[8] "
        f"(B = 7, the draft's block)",
        f"manifest declares `{NEXT_TOKEN_IDS}`, `{NEXT_POSITIONS}`, `{NEXT_VERIFY_KV_LENS}` "
        f"but no `{NEXT_DRAFT_KV_LENS}` (in-graph acceptance needs all of "
        + ", ".join(f"`{n}`" for n in NEXT_INPUTS) + "; output i32[7])"]


def test_acceptance_is_one_dispatch_with_one_mask_literal():
    doc = with_acceptance(dspark_doc())
    disp = doc["programs"][VERIFY]["dispatches"]
    disp[-1]["args"][-1] = {"i32": 5}
    n = len(disp) - 1
    assert problems(doc) == [f"programs.verify.dispatches[{n}] (in-graph acceptance) has 0 "
                             f"i64 literals; the mask token id is its one"]
    disp[-1]["args"][-1] = {"i64": 5}
    disp.append(copy.deepcopy(disp[-1]))
    assert problems(doc) == [f"`{NEXT_TOKEN_IDS}` is passed to 2 dispatches of `verify`; "
                             f"in-graph acceptance is one dispatch"]
