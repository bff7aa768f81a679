"""``kern-serve bench`` over the fake engine: both sides complete every request with exactly
``--output-len`` tokens; the JSON and the table carry vLLM's metrics; the definitions."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kern_serve.bench import BenchOptions, check
from kern_serve.bench.stats import Timing, summarize


def test_bench_runs_both_sides(tmp_path):
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, "-m", "kern_serve.cli", "bench", "--engine-factory",
                        "kern_serve.adapter:open_fake", "--concurrency", "1,2", "--input-len",
                        "12", "--output-len", "6", "--requests", "6", "--json", str(out)],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    assert [lvl["concurrency"] for lvl in data["levels"]] == [1, 2]
    for lvl in data["levels"]:
        n = max(6, 8 * lvl["concurrency"])
        for side in ("server", "engine"):
            s = lvl[side]
            assert (s["completed"], s["failed"], s["output_tokens"]) == (n, 0, 6 * n), s
            assert s["output_tok_s"] > 0 and s["ttft"]["p50_ms"] > 0
            assert s["itl"]["p99_ms"] >= s["itl"]["p50_ms"] > 0
    assert "conc" in r.stdout and "TTFT p50" in r.stdout and "vs engine" in r.stdout
    sides = [line.split()[1] for line in r.stdout.splitlines()[2:] if line.strip()[:1].isdigit()]
    assert sides == ["server", "engine"] * 2


def test_metric_definitions():
    a = Timing(sent=0.0, output_tokens=3, prompt_tokens=4)
    for t in (0.010, 0.015, 0.030):
        a.piece(t)
    b = Timing(sent=1.0, output_tokens=1, prompt_tokens=4)
    b.piece(1.020)
    s = summarize([a, b, Timing(sent=0.0, error="boom")], duration=2.0, concurrency=2)
    assert (s["completed"], s["failed"], s["output_tokens"]) == (2, 1, 4)
    assert s["output_tok_s"] == 2.0 and s["total_tok_s"] == 6.0
    assert s["ttft"]["p50_ms"] == pytest.approx(15.0)          # 10 and 20 ms
    assert s["tpot"]["mean_ms"] == pytest.approx(10.0)         # (30 - 10) / (3 - 1); b has 1
    assert sorted([5.0, 15.0]) == pytest.approx(sorted(1000 * g for g in a.gaps))
    assert s["itl"]["mean_ms"] == pytest.approx(10.0)
    assert s["errors"] == ["boom"]


@pytest.mark.parametrize("kw,msg", [
    ({"concurrency": "0"}, "--concurrency"),
    ({"url": "http://10.0.0.1:8000/v1", "engine": False}, "loopback"),
    ({"url": "http://127.0.0.1:8000/v1"}, "--no-engine"),
    ({"output_len": 0}, "--output-len"),
])
def test_bench_option_checks(kw, msg):
    from kern_run.errors import KernRunError
    with pytest.raises(KernRunError, match=msg):
        check(BenchOptions(**kw))
