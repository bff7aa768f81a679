"""``kern-run bench --profile``: the pure breakdown, the kernel-record extraction (with fake
profiler objects) and the CLI flag. CPU only; torch is not needed."""

import json

import pytest
from typer.testing import CliRunner

from kern_run import bench, runner
from kern_run.bench import Report
from kern_run.cli import app
from kern_run.bench.profile import (CATEGORIES, GEMM, GEMV, OTHER, OWN, TRITON, ProfileError,
                                    breakdown, category, kernel_events, summary_rows)

NVJET = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"
SPLITK = "cublasLt::splitKreduce_kernel"
TRITON_K = "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_12"
OWN_K = "kern_attn_decode_bf16"
ATEN = "void at::native::foo"

# Two back-to-back steps (µs). Step 1 starts at 100, step 2 at 130; the only difference is
# the nvjet GEMM: 10 µs in step 1, 14 µs in step 2. Listed out of order on purpose.
RECORDS = [
    # step 2
    (ATEN, 158.0, 1.0), (NVJET, 130.0, 14.0), (TRITON_K, 146.0, 3.0), (OWN_K, 150.0, 4.0),
    (SPLITK, 155.0, 2.0),
    # step 1
    (NVJET, 100.0, 10.0), (TRITON_K, 112.0, 3.0), (OWN_K, 116.0, 4.0), (SPLITK, 121.0, 2.0),
    (ATEN, 124.0, 1.0),
]


@pytest.mark.parametrize("name,cat", [(NVJET, GEMM), (SPLITK, GEMM), (TRITON_K, TRITON),
                                      (OWN_K, OWN), (ATEN, OTHER),
                                      ("ampere_bf16_s16816gemm_bf16_128x64", GEMM),
                                      ("Kernel_cuBLAS_thing", GEMM),
                                      ("kern_gemv_bf16", GEMV),
                                      ("void cutlass::Kernel<triton_x>", OTHER)])
def test_category(name, cat):
    assert category(name) == cat


def test_breakdown_two_steps():
    b = breakdown(RECORDS, steps=2)
    assert b.steps == 2
    assert b.kernels == 5.0
    # busy: (1 + 14 + 3 + 4 + 2) + (10 + 3 + 4 + 2 + 1) = 24 + 20 = 44 → 22 per step
    assert b.busy_us == 22.0
    # span: first start 100, last end 158 + 1 = 159 → 59 / 2
    assert b.span_us == 29.5
    assert b.gaps_us == 7.5
    cats = {g.name: (g.count, g.us, g.mean_us) for g in b.categories}
    assert [g.name for g in b.categories] == list(CATEGORIES)
    # GEMM: nvjet 10 + 14, splitK 2 + 2 = 28 µs over 4 kernels, 2 steps
    assert cats[GEMM] == (2.0, 14.0, 7.0)
    assert cats[TRITON] == (1.0, 3.0, 3.0)
    assert cats[OWN] == (1.0, 4.0, 4.0)
    assert cats[OTHER] == (1.0, 1.0, 1.0)
    assert b.share(GEMM) == 14.0 / 22.0
    assert [(g.name, g.count, g.us, g.mean_us, g.category) for g in b.top] == [
        (NVJET, 1.0, 12.0, 12.0, GEMM), (OWN_K, 1.0, 4.0, 4.0, OWN),
        (TRITON_K, 1.0, 3.0, 3.0, TRITON), (SPLITK, 1.0, 2.0, 2.0, GEMM),
        (ATEN, 1.0, 1.0, 1.0, OTHER)]


def test_breakdown_empty_category_and_top_limit():
    recs = [(f"kern_k{i:02d}", 10.0 * i, float(i + 1)) for i in range(12)]
    b = breakdown(recs, steps=1)
    assert {g.name: g.count for g in b.categories} == {GEMM: 0.0, GEMV: 0.0, TRITON: 0.0,
                                                         OWN: 12.0, OTHER: 0.0}
    assert next(g for g in b.categories if g.name == GEMM).mean_us == 0.0
    assert b.share(GEMM) == 0.0
    assert [g.name for g in b.top] == [f"kern_k{i:02d}" for i in range(11, 1, -1)]


def test_breakdown_empty_input_is_a_clear_error():
    with pytest.raises(ValueError, match="no kernel records"):
        breakdown([], steps=2)
    with pytest.raises(ValueError, match="steps must be at least 1"):
        breakdown(RECORDS, steps=0)


def test_lines_and_dict():
    b = breakdown(RECORDS, steps=2)
    text = "\n".join(b.lines(width=20))
    assert "2 steps, 5.0 kernels/step" in text
    assert "busy 22.0 µs/step, span 29.5 µs/step, gaps 7.5 µs/step (25.4 % of span)" in text
    assert "GEMM (cuBLAS)" in text and "63.6%" in text  # 14 / 22
    assert "nvjet_sm90_tst_64x8…" in text  # cut to 20 characters
    d = b.as_dict()
    json.dumps(d)
    assert d["busy_us"] == 22.0 and d["categories"][0]["name"] == GEMM
    assert d["top"][0]["name"] == NVJET
    rows = summary_rows(b)
    assert rows[0][1] == "22.0 / 7.5" and rows[1][1] == "63.6%"


# -- extraction from a (fake) torch.profiler -------------------------------------------------
class _Dev:
    def __init__(self, name):
        self.name = name


class _KinetoEvent:
    def __init__(self, name, dev, start_ns, dur_ns):
        self._n, self._d, self._s, self._u = name, dev, start_ns, dur_ns

    def name(self):
        return self._n

    def device_type(self):
        return _Dev(self._d)

    def start_ns(self):
        return self._s

    def duration_ns(self):
        return self._u


class _Results:
    def __init__(self, events):
        self._e = events

    def events(self):
        return self._e


class _Prof:
    """``prof.profiler.kineto_results.events()`` and ``prof.export_chrome_trace(path)``."""

    def __init__(self, kineto=None, trace=None):
        self.profiler = type("P", (), {})()
        if kineto is not None:
            self.profiler.kineto_results = _Results(kineto)
        self._trace = trace

    def export_chrome_trace(self, path):
        if self._trace is None:
            raise RuntimeError("no trace")
        with open(path, "w") as f:
            json.dump(self._trace, f)


def test_kernel_events_from_kineto():
    prof = _Prof(kineto=[_KinetoEvent("aten::mm", "CPU", 0, 5000),
                         _KinetoEvent(NVJET, "CUDA", 100_000, 10_500),
                         _KinetoEvent("Memcpy HtoD (Pinned -> Device)", "CUDA", 90_000, 1000),
                         _KinetoEvent(OWN_K, "CUDA", 111_000, 4000)])
    assert kernel_events(prof) == [(NVJET, 100.0, 10.5), (OWN_K, 111.0, 4.0)]


def test_kernel_events_fall_back_to_the_chrome_trace():
    trace = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 5},
        {"ph": "X", "cat": "kernel", "name": TRITON_K, "ts": 100.25, "dur": 3.5},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": 104, "dur": 1}]}
    assert kernel_events(_Prof(trace=trace)) == [(TRITON_K, 100.25, 3.5)]


def test_kernel_events_none_is_a_clear_error():
    with pytest.raises(ProfileError, match="recorded no CUDA kernels.*_from_kineto.*"
                                           "_from_chrome_trace"):
        kernel_events(_Prof(kineto=[_KinetoEvent("aten::mm", "CPU", 0, 1)]))


# -- the CLI flag ---------------------------------------------------------------------------
@pytest.mark.parametrize("args,want", [(["--profile"], True), (["--no-profile"], False),
                                       ([], False)])
def test_bench_accepts_profile(monkeypatch, tmp_path, args, want):
    seen = {}

    def fake_run_bench(**kw):
        seen.update(kw)
        return Report()

    monkeypatch.setattr(runner, "probe_gpu", lambda: (True, "ok"))
    monkeypatch.setattr(bench, "run_bench", fake_run_bench)
    q = tmp_path / "q"
    q.mkdir()
    (q / "manifest.json").write_text("{}")
    r = CliRunner().invoke(app, ["bench", "--case", "qwen3", "--qwen3", str(q), *args])
    assert r.exit_code == 0, r.output
    assert seen["profile"] is want and seen["cases"] == ["qwen3"]


def test_kern_profile_breaks_down_the_childs_records(monkeypatch, capsys):
    """bench.kern_profile: the child's JSON records (lists) become the Breakdown; a failing
    child is one FAILED row and None."""
    from kern_run.errors import KernRunError

    got = {}

    def fake_child(manifest, kernels, weights, capacity, gpu):
        got["args"] = (manifest, kernels, weights, capacity, gpu)
        return {"events": [list(r) for r in RECORDS], "steps": 2}
    monkeypatch.setattr(bench, "profile_in_child", fake_child)
    load = dict(manifest="m.json", kernels="k", weights=["w"], capacity=None)
    rep = Report()
    b = bench.kern_profile(rep, "qwen3-4b", load, 0)
    assert got["args"] == ("m.json", "k", ["w"], None, 0)
    assert b == breakdown(RECORDS, 2) and rep.rows == []
    assert "bench: qwen3-4b decode profile: 2 steps" in capsys.readouterr().err

    def failing(*a):
        raise KernRunError("decode profile: ProfileError: no kernels")
    monkeypatch.setattr(bench, "profile_in_child", failing)
    rep = Report()
    assert bench.kern_profile(rep, "qwen3-4b", load, 0) is None
    assert [(r.what, r.kern) for r in rep.rows] == [("decode profile", "FAILED")]
