"""The Qwen3 device check's CPU parts (``device_check_qwen3.py`` runs on the GPU machine):
argument parsing, prompts and prefill plan, the exit rule on fake rows (device_check.py's
rule plus the margin-vs-error one), the table and summary; and device_check.py's kern
helpers it shares, against a fake runtime. Importing the script touches neither torch nor
transformers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).parents[1] / "device_check_qwen3.py"


@pytest.fixture(scope="module")
def q3():
    spec = importlib.util.spec_from_file_location("kern_gen_device_check_qwen3", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    assert "torch" not in mod.__dict__ and "torch" not in mod.dc.__dict__
    assert mod.HF_CAPTURE.is_file()
    return mod


def test_arguments(q3, tmp_path):
    a = q3.parse_args(["--out", str(tmp_path)])
    assert (a.example, a.work, a.source, a.seed) == (Path("examples/qwen3-4b"),
                                                     Path("/tmp/kern-qwen3"), "hf", 0)
    assert (a.prompts, a.tokens, a.chunk, a.fp32) == (3, 104, 16, True)
    assert (a.factor, a.floor, a.sigmas) == (2.0, 0.02, 5.0) and a.out == tmp_path
    a = q3.parse_args(["--source", "memory", "--no-fp32", "--sigmas", "4", "--tokens", "65"])
    assert (a.source, a.fp32, a.sigmas, a.tokens) == ("memory", False, 4.0, 65)
    for bad in (["--tokens", "64"], ["--source", "gguf"], ["--prompts", "0"]):
        with pytest.raises(SystemExit):
            q3.parse_args(bad)


def test_plan_and_prompts(q3):
    assert q3.prefill_lengths(104) == [0, 1, 40]
    assert q3.prefill_lengths(65) == [0, 1]
    a, b = q3.prompt_ids(0, 104, 151936, 0), q3.prompt_ids(1, 104, 151936, 0)
    assert a == q3.prompt_ids(0, 104, 151936, 0) and a != b and len(a) == 104
    assert all(isinstance(t, int) and 0 <= t < 151936 for t in a + b)
    # >= 64 teacher-forced positions for every prefill length, all inside the context
    for p in q3.prefill_lengths(104):
        assert 104 - p >= 64


def test_rule_is_documented(q3):
    doc = " ".join(q3.__doc__.split())
    assert "margin > 0.5 logits" in doc and "exceeds 5 x err (`--sigmas`)" in doc
    assert "above 1.5 x HF-bf16's" in doc


def qr(q3, rel_k32=0.01, rel_h32=0.01, agree=True, ref_margin=0.2, err=0.03):
    base = q3.dc.Row(0, 40, 50, 0.03, agree, None if agree else ref_margin, True,
                     rel_k32, rel_h32)
    return q3.QRow(base, ref_margin, err)


def test_verdict(q3):
    assert q3.verdict(qr(q3)) == ""
    assert q3.verdict(qr(q3, rel_k32=0.05)) == "fp32"                  # device_check's rule
    # argmax: fine at a margin within 5 x err, bad beyond it, and at > 0.5 logits anyway
    assert q3.verdict(qr(q3, agree=False, ref_margin=0.12, err=0.03)) == ""
    assert q3.verdict(qr(q3, agree=False, ref_margin=0.16, err=0.03)) == "argmax/err"
    assert q3.verdict(qr(q3, agree=False, ref_margin=0.16, err=0.03), sigmas=6) == ""
    assert q3.verdict(qr(q3, agree=False, ref_margin=0.6, err=0.2)) == "argmax"
    assert q3.verdict(qr(q3, rel_k32=0.05, agree=False, ref_margin=0.3, err=0.01)) == \
        "fp32+argmax/err"


def test_table_and_summary(q3):
    rows = [qr(q3), qr(q3, rel_k32=0.05, ref_margin=0.01),
            qr(q3, agree=False, ref_margin=0.16, err=0.03),
            qr(q3, agree=False, ref_margin=0.02, err=0.03)]
    lines = q3.table(rows)
    assert lines[0].split()[-4:] == ["judged", "ref_margin", "err", "margin/err"]
    assert len(lines) == 5 and len({len(x) for x in lines[1:]}) == 1   # aligned columns
    assert lines[1].split()[-4:] == ["ok", "0.200", "0.0300", "6.7"]
    assert lines[2].split()[-5:-3] == ["far", "fp32"]
    assert lines[3].split()[-5:-3] == ["BAD", "argmax/err"]
    assert lines[4].split()[-4:] == ["ok", "0.020", "0.0300", "0.7"]
    s = q3.summary(rows)
    assert s[0].startswith("summary: 4 positions") and len(s) == 6
    assert s[3].startswith("distribution vs fp32")
    assert s[4].startswith("issue 7: argmax agreement where the HF-bf16 margin exceeds kern's "
                           "error (err median 0.0300, max 0.0300 logits): 1/2; where it "
                           "exceeds 5 x err: 1/2")
    assert s[5] == "bad positions (argmax): 1 (at an HF-bf16 margin > 0.5, or > 5 x err: 1)"


class FakeRuntime:
    """Records writes and runs; `logits` / `next_token` as a decode leaves them."""

    table_pages, capacity = 4, 32       # a block table of 4 pages, 2 of them loaded

    def __init__(self, logits: np.ndarray, nt: int) -> None:
        self.calls: list = []
        self.out = {"logits": logits, "next_token": np.array([nt], np.int64)}

    def write(self, name, value):
        self.calls.append(("write", name, np.asarray(value).tolist()))

    def run(self, program, sizes):
        self.calls.append(("run", program, sizes))

    def read(self, name):
        return self.out[name]


def test_shared_kern_helpers(q3):
    dc = q3.dc
    rt = FakeRuntime(np.zeros((1, 4), np.uint16), 0)
    dc.kern_prefill(rt, list(range(100, 140)), 0, 16, 1024)   # 40 tokens: 16 + 16 + 8
    runs = [c for c in rt.calls if c[0] == "run"]
    assert runs == [("run", "prefill", {"tokens": n}) for n in (16, 16, 8)]
    pos0 = [c[2] for c in rt.calls if c[1] == "pos0"]
    assert pos0 == [[0], [16], [32]]
    assert [c[2] for c in rt.calls if c[1] == "positions"][2] == list(range(32, 40))
    # bf16 bits: 1.0 = 0x3f80, 2.0 = 0x4000, -1.0 = 0xbf80, 0.5 = 0x3f00
    rt = FakeRuntime(np.array([[0x3F80, 0x4000, 0xBF80, 0x3F00]], np.uint16), 1)
    kl, nt = dc.kern_decode(rt, 7, 41)
    assert kl.tolist() == [1.0, 2.0, -1.0, 0.5] and nt == 1
    assert ("run", "decode", {"tokens": 1}) in rt.calls and ("write", "pos0", [41]) in rt.calls
    # the paged inputs of the caller contract (issue 20): slot = position, kv_len = pos + 1,
    # the identity table with the pages beyond the loaded capacity 0
    for name, want in (("slots", [41]), ("kv_lens", [42]), ("block_table", [[0, 1, 0, 0]])):
        assert ("write", name, want) in rt.calls, name
    r = np.array([1.0, 1.9, -1.0, 0.5], np.float32)
    row = dc.position_row(2, 40, 41, kl, nt, r, r.astype(np.float64))
    assert row.agree and row.margin is None and row.rel_h32 == 0.0
    q = q3.qrow(row, kl, r)
    assert q.ref_margin == pytest.approx(0.9) and q.err == pytest.approx(0.05)
