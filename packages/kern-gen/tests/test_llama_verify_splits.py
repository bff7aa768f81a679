"""``--verify-splits decode`` (issue 15's Qwen3-shape round): in the programs whose rows are one
sequence (verify, the DSpark draft) the split-KV attention gets ``s_min · tokens`` through a
7th i32 interface parameter, so every row splits its keys as a decode row would (ABI.md 3a).
Against the default (``divided``) only those attention kernels and their dispatches' last
argument differ; decode and batch keep the literal; every variant verifies clean; a bad value
is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import kern_manifest
import pytest
from kg_own import own_committed
from kern_mine import encode_json, mine

from kern_gen.dspark.generate import generate as generate_dspark
from kern_gen.llama import WiringError, generate
from kern_gen.llama.command import PRESETS
from kern_gen.llama.ir import TOK
from kern_gen.llama.own import DECODE_IFACE, decode_splits

ROOT = Path(__file__).resolve().parents[3]
DRAFT = {"llama": ROOT / "examples/smollm2-135m-dspark/dspark.json",
         "qwen3": ROOT / "examples/qwen3-4b-dspark/dspark.json"}
DSPARK_EX = {"llama": ROOT / "examples/smollm2-135m-dspark",
             "qwen3": ROOT / "examples/qwen3-4b-dspark"}


@pytest.fixture(scope="module")
def presets(tmp_path_factory) -> dict[str, tuple]:
    """name -> (capture, config, plain example, label, mined file), each capture mined once."""
    out = {}
    for name in PRESETS:
        cap, cfg, ex, label = (ROOT / p if i < 3 else p for i, p in enumerate(PRESETS[name]))
        mined = tmp_path_factory.mktemp("mined") / f"{name}.json"
        mined.write_bytes(encode_json(mine(cap)))
        out[name] = (cap, cfg, ex, label, mined)
    return out


@pytest.fixture(scope="module")
def variants(presets) -> dict[str, dict]:
    out = {}
    for name, (cap, cfg, ex, label, mined) in presets.items():
        own = own_committed(ex)
        # the split partial (--verify-attention split, the default; rows is tested below)
        out[name] = {v: json.loads(generate(cap, cfg, mined=mined, label=label, own_cubins=own,
                                            verify_splits=v, verify_attention="split").manifest)
                     for v in ("divided", "decode", "4")}
        out[name]["dspark"] = json.loads(generate_dspark(
            cap, cfg, DRAFT[name], mined=mined, label=label, own_cubins=own_committed(
                DSPARK_EX[name]), verify_splits="decode", verify_attention="split").manifest)
    return out


@pytest.mark.parametrize("name", list(PRESETS))
def test_only_the_one_sequence_attention_differs(variants, name):
    """Every dispatch runs the same kernel body on the same arguments but verify's attention,
    which takes the extra argument.  (The default merges batch's attention into verify's
    equal body; with the variant batch gets a kernel of its own, equal to that body.)"""
    a, b = variants[name]["divided"], variants[name]["decode"]
    for key in ("meta", "symbols", "states", "buffers"):
        assert a[key] == b[key], key
    s_min = decode_splits({"llama": 3, "qwen3": 8}[name])
    k = b["kernels"]["verify.attention"]
    assert k["params"] == [*DECODE_IFACE, "i32"]
    partial, reduce = k["impl"]["steps"]
    assert partial["args"][15] == reduce["args"][6] == {"arg": 6}
    old = a["kernels"]["verify.attention"]
    assert old["impl"]["steps"][0]["args"][15] == {"i32": s_min}
    assert list(a["programs"]) == list(b["programs"])
    changed = 0
    for prog in a["programs"]:
        pa, pb = a["programs"][prog]["dispatches"], b["programs"][prog]["dispatches"]
        assert len(pa) == len(pb), prog
        for da, db in zip(pa, pb):
            ka, kb = a["kernels"][da["kernel"]], b["kernels"][db["kernel"]]
            if prog == "verify" and db["kernel"] == "verify.attention":
                assert db["args"] == [*da["args"], {"expr": {"mul": [TOK, s_min]}}]
                changed += 1
            else:
                assert (ka, da["args"]) == (kb, db["args"]), (prog, db["kernel"])
    assert changed == {"llama": 30, "qwen3": 36}[name]
    st = b["kernels"]["batch.attention"]["impl"]["steps"][0]
    assert st["args"][15] == {"i32": s_min}
    # decode's attention is the cluster kernel with the rope folded in (no splits to pass)
    assert "decode.attention" not in b["kernels"]
    assert b["kernels"]["decode.rope_attention"]["impl"]["steps"][0]["symbol"].startswith(
        "kern_attn_decode_cluster_rope")


@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("variant", ["decode", "4", "dspark"])
def test_the_variant_verifies_clean(variants, name, variant):
    text = json.dumps(variants[name][variant])
    diags = kern_manifest.verify(kern_manifest.decode(text))
    assert not diags, kern_manifest.render_human(diags, text)


@pytest.mark.parametrize("name", list(PRESETS))
def test_dspark_draft_and_verify_get_per_row_splits(variants, name):
    """In the DSpark manifest the attention dispatches of verify and of the draft pass
    s_min · tokens (their kernel takes it); decode_spec and batch do not (decode's is the
    folded cluster kernel)."""
    doc = variants[name]["dspark"]
    s_min = decode_splits({"llama": 3, "qwen3": 8}[name])
    seen = set()
    for prog, p in doc["programs"].items():
        for d in p["dispatches"]:
            if not d["kernel"].endswith(".attention") or prog == "prefill":
                continue
            params = doc["kernels"][d["kernel"]]["params"]
            per_row = prog in ("verify", "draft")
            assert params == ([*DECODE_IFACE, "i32"] if per_row else DECODE_IFACE), prog
            if per_row:
                assert d["args"][-1] == {"expr": {"mul": [TOK, s_min]}}
            seen.add(prog)
    # decode's attention: the folded cluster kernel (decode.rope_attention, no split count)
    assert seen == {"decode_spec", "verify", "batch", "draft"}
    assert any(d["kernel"] == "decode.rope_attention"
               for d in doc["programs"]["decode"]["dispatches"])


def test_bad_value_is_refused_by_the_generator():
    """(The CLI's one-line refusal: test_cli_errors.py.)"""
    for bad in ("x", "0", "257", "-4"):
        with pytest.raises(WiringError, match=f"--verify-splits `{bad}`"):
            generate(ROOT / "no-capture", None, verify_splits=bad)


@pytest.mark.parametrize("name", list(PRESETS))
def test_a_split_count_is_passed_times_tokens(variants, name):
    """``--verify-splits 4``: verify's attention gets ``4 · tokens`` and differs from
    ``decode``'s manifest in that factor only."""
    n4, dec = variants[name]["4"], variants[name]["decode"]
    s_min = decode_splits({"llama": 3, "qwen3": 8}[name])
    d4 = [d for d in n4["programs"]["verify"]["dispatches"] if d["kernel"] == "verify.attention"]
    assert d4 and all(d["args"][-1] == {"expr": {"mul": [TOK, 4]}} for d in d4)
    dd = [d for d in dec["programs"]["verify"]["dispatches"] if d["kernel"] == "verify.attention"]
    assert [d["args"][:-1] for d in d4] == [d["args"][:-1] for d in dd]
    assert all(d["args"][-1] == {"expr": {"mul": [TOK, s_min]}} for d in dd)
    assert n4["kernels"]["verify.attention"] == dec["kernels"]["verify.attention"]


@pytest.fixture(scope="module")
def rows_variants(presets) -> dict[str, dict]:
    out = {}
    for name, (cap, cfg, _, label, mined) in presets.items():
        out[name] = {v: json.loads(generate_dspark(
            cap, cfg, DRAFT[name], mined=mined, label=label, own_cubins=own_committed(
                DSPARK_EX[name]), verify_attention=v).manifest) for v in ("rows", "verify-rows")}
    return out


@pytest.mark.parametrize("name", list(PRESETS))
def test_rows_attention_in_verify_and_draft_only(rows_variants, name):
    """``--verify-attention rows``: verify's and the draft's attention run the tensor-core
    rows partial (grid: kv heads x S, one block for all rows) and the split-KV reduce, given
    decode's split count times tokens and tokens; decode_spec and batch keep the split
    kernel (decode: the folded cluster kernel); the manifest verifies clean."""
    doc = rows_variants[name]["rows"]
    diags = kern_manifest.verify(kern_manifest.decode(json.dumps(doc)))
    assert not diags
    kvh = {"llama": 3, "qwen3": 8}[name]
    s_min = decode_splits(kvh)
    seen = set()
    for prog, p in doc["programs"].items():
        for d in p["dispatches"]:
            if not d["kernel"].endswith(".attention") or prog == "prefill":
                continue
            k = doc["kernels"][d["kernel"]]
            partial = k["impl"]["steps"][0]
            if prog in ("verify", "draft"):
                assert partial["symbol"].startswith("kern_attn_rows_partial_bf16_d")
                assert partial["grid"] == [kvh, 4 * s_min, 1]
                assert partial["args"][15] == {"arg": 6} and partial["args"][17] == {"arg": 7}
                assert k["impl"]["steps"][1]["args"][6] == {"arg": 6}
                assert k["params"] == [*DECODE_IFACE, "i32", "i32"]
                assert d["args"][-2:] == [{"expr": {"mul": [TOK, s_min]}}, {"sym": "tokens"}]
            else:
                assert partial["symbol"].startswith("kern_attn_decode_partial_bf16_d")
                assert k["params"] == DECODE_IFACE
            seen.add(prog)
    # decode's attention: the folded cluster kernel (decode.rope_attention, no split count)
    assert seen == {"decode_spec", "verify", "batch", "draft"}
    assert any(d["kernel"] == "decode.rope_attention"
               for d in doc["programs"]["decode"]["dispatches"])


@pytest.mark.parametrize("name", list(PRESETS))
def test_verify_rows_keeps_the_split_partial_in_the_draft(rows_variants, name):
    """``--verify-attention verify-rows``: verify's attention as with ``rows``,
    the draft's the split kernel of decode's interface; every other dispatch the same."""
    rows, vr = rows_variants[name]["rows"], rows_variants[name]["verify-rows"]
    assert not kern_manifest.verify(kern_manifest.decode(json.dumps(vr)))
    assert vr["programs"]["verify"] == rows["programs"]["verify"]
    assert vr["kernels"]["verify.attention"] == rows["kernels"]["verify.attention"]
    draft = [d for d in vr["programs"]["draft"]["dispatches"] if d["label"].endswith(".attn")]
    assert draft
    for d in draft:
        k = vr["kernels"][d["kernel"]]
        assert k["params"] == DECODE_IFACE and len(d["args"]) == len(DECODE_IFACE)
        assert k["impl"]["steps"][0]["symbol"].startswith("kern_attn_decode_partial_bf16_d")
    others = [p for p in vr["programs"] if p not in ("verify", "draft")]
    for p in others:
        assert vr["programs"][p] == rows["programs"][p], p
