"""The device check's CPU parts (``device_check.py`` runs on the GPU machine): argument
parsing, the fp32-relative rule that sets the exit code, and the table and summary, on fake
rows. Importing the script touches neither torch nor transformers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "device_check.py"


@pytest.fixture(scope="module")
def dc():
    spec = importlib.util.spec_from_file_location("kern_gen_device_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # NamedTuple's annotations resolve through the module
    spec.loader.exec_module(mod)
    assert "torch" not in mod.__dict__
    return mod


def test_arguments(dc, tmp_path):
    a = dc.parse_args(["--gguf", str(tmp_path / "m.gguf"), "--out", str(tmp_path)])
    assert (a.gen, a.chunk, a.factor, a.floor) == (24, 16, 2.0, 0.02)
    assert a.example == Path("examples/smollm2-135m") and a.gguf == tmp_path / "m.gguf"
    a = dc.parse_args(["--gguf", "g", "--factor", "3", "--floor", "0.05"])
    assert a.chat == [] and a.prompt == []
    assert dc.parse_args(["--gguf", "g", "--prompt", "Water boils at"]).prompt == \
        ["Water boils at"]
    assert dc.parse_args(["--gguf", "g", "--chat", "Hi?", "--chat", "Why?"]).chat == \
        ["Hi?", "Why?"]
    assert (a.factor, a.floor) == (3.0, 0.05)
    with pytest.raises(SystemExit):
        dc.parse_args([])   # --gguf is required


def test_rule_is_documented(dc):
    doc = " ".join(dc.__doc__.split())
    assert "exceeds max(2 x HF-bf16's relative error vs fp32, 2 %)" in doc
    assert "(> 0.5 logits)" in doc
    assert "exceeds 1.5 x HF-bf16's (`--dist`)" in doc


def row(dc, rel_k32, rel_h32, agree=True, margin=None, rel=0.02):
    return dc.Row(0, 0, 1, rel, agree, margin, agree, rel_k32, rel_h32)


def test_verdict(dc):
    # bf16 noise: kern is as far from fp32 as HF-bf16 is, even at 13 %
    assert dc.verdict(row(dc, 0.13, 0.09, rel=0.134)) == ""
    assert dc.verdict(row(dc, 0.18, 0.09)) == ""          # exactly 2x: still fine
    assert dc.verdict(row(dc, 0.181, 0.09)) == "fp32"
    # the floor: HF-bf16 lands very close to fp32, kern within 2 %
    assert dc.verdict(row(dc, 0.019, 0.001)) == ""
    assert dc.verdict(row(dc, 0.021, 0.001)) == "fp32"
    # argmax: a near-tie is fine, a clear disagreement is not
    assert dc.verdict(row(dc, 0.01, 0.01, agree=False, margin=0.125)) == ""
    assert dc.verdict(row(dc, 0.01, 0.01, agree=False, margin=0.6)) == "argmax"
    assert dc.verdict(row(dc, 0.5, 0.01, agree=False, margin=0.6)) == "fp32+argmax"
    assert dc.verdict(row(dc, 0.03, 0.01), factor=3.0) == ""


def test_table_and_summary(dc):
    rows = [dc.Row(0, 0, 0, 0.0361, True, None, True, 0.030, 0.025),
            dc.Row(0, 0, 1, 0.1028, True, None, True, 0.090, 0.070),
            dc.Row(2, 7, 30, 0.0400, False, 0.125, True, 0.031, 0.020),
            dc.Row(3, 1, 11, 0.0500, True, None, True, 0.200, 0.010)]
    lines = dc.table(rows)
    assert lines[0].split() == ["prompt", "prefill_p", "pos", "rel_err", "argmax",
                                "ref_margin_if_disagree", "next_token==argmax", "kern_vs_fp32",
                                "hf16_vs_fp32", "ratio", "judged"]
    assert len(lines) == 5 and len({len(x) for x in lines[1:]}) <= 2   # aligned columns
    assert lines[1].split() == ["0", "0", "0", "0.0361", "ok", "True", "0.0300", "0.0250",
                                "1.20", "ok"]
    assert lines[3].split()[4:6] == ["DIFF", "0.125"] and lines[3].endswith("ok")
    assert lines[4].endswith("far fp32") and " 20.00 " in lines[4]
    s = dc.summary(rows)
    assert s[0] == ("summary: 4 positions, rel err median 0.0450 max 0.1028; argmax "
                    "agreement 3/4")
    assert "kern median 0.0605 max 0.2000" in s[1] and "HF-bf16 median 0.0225 max 0.0700" in s[1]
    assert "(prompt 3, p 1, pos 11): kern 0.2000 vs HF-bf16 0.0100" in s[1]
    assert s[2].startswith("per position: 1 far from fp32 (kern vs fp32 > max(2 x HF-bf16 vs "
                           "fp32, 2%); counted, not judged), 0 argmax differing")
    # p90 interpolates at rank 0.9 x 3 = 2.7: kern 0.09 + 0.7 x 0.11 = 0.1670, HF 0.025 + 0.7 x 0.045
    assert s[3] == ("distribution vs fp32, kern vs HF-bf16: median 0.0605 vs 0.0225 (2.69x), "
                    "p90 0.1670 vs 0.0565 (2.96x), max 0.2000 vs 0.0700 (2.86x); judged: each "
                    "<= 1.5x: FAILED (median 0.0605 > 1.5 x 0.0225; p90 0.1670 > 1.5 x 0.0565; "
                    "max 0.2000 > 1.5 x 0.0700)")


def test_judged_and_distribution(dc):
    assert not dc.judged("") and not dc.judged("fp32")
    assert dc.judged("argmax") and dc.judged("fp32+argmax") and dc.judged("argmax/err")
    # kern as wide as HF-bf16 (a permutation of the same errors): passes at any dist >= 1
    errs = [0.01, 0.02, 0.03, 0.05, 0.10]
    rows = [row(dc, k, h) for k, h in zip(errs, reversed(errs))]
    assert dc.distribution(rows)[1] == [] and dc.distribution(rows, dist=1.0)[1] == []
    # one outlier in kern's tail: only the max fails
    rows = [row(dc, k, h) for k, h in zip(errs[:-1] + [0.16], errs)]
    line, fails = dc.distribution(rows)
    assert fails == ["max 0.1600 > 1.5 x 0.1000"] and line.endswith("FAILED (max 0.1600 > 1.5 x 0.1000)")
