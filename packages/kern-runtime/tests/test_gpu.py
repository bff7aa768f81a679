"""GPU tests (``-m gpu``): small manifests around the kernels in ``tests/cu/``, compiled here
with nvcc for sm_90. Skipped where ``cuInit`` fails or no device is present."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import krt_manifests as gm
from krt_helpers import st_tensor, write_safetensors
from kern_runtime import (CallerError, KernelArtifactError, Runtime, WeightArtifactError,
                          from_bf16, to_bf16)

pytestmark = pytest.mark.gpu

OUTS = ("y", "lit", "sval", "big", "da", "db", "g")


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    """Compiled cubins, the features manifest, its weight file."""
    if gm.nvcc() is None:
        pytest.skip("nvcc not found")
    root = tmp_path_factory.mktemp("gpu")
    shas = gm.build_cubins(root / "kernels")
    w = np.linspace(-2, 2, 16, dtype=np.float32)
    wfile = write_safetensors(root / "w.safetensors", {"w": st_tensor(w)})
    return {"root": root, "kernels": root / "kernels", "shas": shas, "w": w, "wfile": wfile}


def write_manifest(art, obj, name="m.json"):
    p = art["root"] / name
    p.write_text(json.dumps(obj))
    return p


def features(art):
    return gm.features(art["shas"]["main.cubin"])


def load(art, obj=None, weights=None, **kw):
    obj = features(art) if obj is None else obj
    return Runtime.load(write_manifest(art, obj), art["kernels"],
                        weights=[art["wfile"]] if weights is None else weights,
                        capacity=gm.CAPACITY, **kw)


@pytest.fixture(scope="module")
def rt(art):
    r = load(art)
    yield r
    r.close()


def expected(x: np.ndarray, w: np.ndarray, tokens: int) -> dict[str, np.ndarray]:
    n = tokens * 16
    lit = np.array([200, tokens * 10**12, struct.unpack("<I", struct.pack("<f", -1.25))[0],
                    4000000000, -123456, 7, -9000000000000, 0x5EED], np.int64)
    return {
        "y": (x * w[None, :]).astype(np.float32) + np.float32(0.5),
        "lit": lit,
        "sval": np.float32(2) * x,
        "big": np.float32(3) * x,
        "da": np.ones_like(x),
        "db": np.full_like(x, 2.5),
        "g": (np.arange(n, dtype=np.int32) // 32).reshape(tokens, 16),
    }


def check_outputs(rt, x, w, tokens):
    got = {k: rt.read(k) for k in OUTS}
    want = expected(x, w, tokens)
    for k in OUTS:
        assert got[k].shape == want[k].shape, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=f"buffer {k} at tokens={tokens}")
    return got


@pytest.mark.parametrize("tokens", [1, 37, 64])
def test_features_eager_and_graph_bit_identical(rt, art, tokens):
    rng = np.random.default_rng(tokens)
    x = rng.standard_normal((tokens, 16)).astype(np.float32)
    rt.write("x", x)
    rt.run("main", {"tokens": tokens}, graph=False)
    check_outputs(rt, x, art["w"], tokens)
    # graph on other data (so a graph that did nothing would fail), then eager on the same
    x2 = rng.standard_normal((tokens, 16)).astype(np.float32)
    rt.write("x", x2)
    rt.run("main", {"tokens": tokens}, graph=True)
    graph_out = check_outputs(rt, x2, art["w"], tokens)
    rt.run("main", {"tokens": tokens}, graph=False)
    eager_out = {k: rt.read(k) for k in OUTS}
    for k in OUTS:
        assert graph_out[k].tobytes() == eager_out[k].tobytes(), k
    # replaying the cached graph with new inputs written outside it
    x3 = rng.standard_normal((tokens, 16)).astype(np.float32)
    rt.write("x", x3)
    rt.run("main", {"tokens": tokens})
    check_outputs(rt, x3, art["w"], tokens)


def test_carry_between_programs(rt):
    x = np.random.default_rng(7).standard_normal((5, 16)).astype(np.float32)
    rt.write("x", x)
    rt.run("produce", {"tokens": 5})
    rt.run("consume", {"tokens": 5})
    one = np.float32(1)
    # two kernels, two roundings: c = 2x + 1 (exact 2x), then z = c + 1
    np.testing.assert_array_equal(rt.read("z"), (np.float32(2) * x + one) + one)
    # eager path, and a carry written by the caller
    c = np.full((5, 16), 10, np.float32)
    rt.write("c", c)
    rt.run("consume", {"tokens": 5}, graph=False)
    np.testing.assert_array_equal(rt.read("z"), c + 1)


def test_caller_misuse_is_refused_and_runtime_stays_usable(rt, art):
    for bad in ({"tokens": 65}, {"tokens": 0}, {"tokenz": 3}, {}):
        with pytest.raises(CallerError, match="program `main`"):
            rt.run("main", bad)
    with pytest.raises(CallerError, match="unknown program"):
        rt.run("nope", {"tokens": 1})
    with pytest.raises(CallerError, match="output buffer"):
        rt.write("y", np.zeros((1, 16), np.float32))
    with pytest.raises(CallerError, match="float64"):
        rt.write("x", np.zeros((1, 16)))
    with pytest.raises(CallerError, match="do not fit"):
        rt.write("x", np.zeros((65, 16), np.float32))
    with pytest.raises(CallerError, match="unknown buffer"):
        rt.read("nope")
    x = np.ones((3, 16), np.float32)
    rt.write("x", x)
    rt.run("main", {"tokens": 3})
    check_outputs(rt, x, art["w"], 3)


def test_summary_lists_everything(rt):
    text = rt.summary()
    print(text)
    for needle in ("manifest `kern-runtime-gpu-test`", "sm_90", "st: 64 B/token", "weight",
                   "mul_w <- main.cubin (pinned)", "dup <- dup_a.cubin (found by layout)",
                   "dup <- dup_b.cubin (found by layout)", "smem 65536", "weights: 1 bound",
                   "graphs captured:"):
        assert needle in text, needle
    assert rt.graphs and rt.graphs[0].nodes == 11


# --- bad artifacts: clear errors, and the next load works ----------------------------------

def assert_good_load_works(art):
    with load(art) as r:
        x = np.full((2, 16), 3, np.float32)
        r.write("x", x)
        r.run("main", {"tokens": 2})
        check_outputs(r, x, art["w"], 2)


def test_wrong_sha256(art):
    obj = features(art)
    obj["kernels"]["twostep"]["impl"]["steps"][1]["sha256"] = "f" * 64
    with pytest.raises(KernelArtifactError) as e:
        load(art, obj)
    print(e.value)
    assert "cubin `main.cubin`: sha256 is" in str(e.value)
    assert "kernel `twostep` step 1 pins " + "f" * 64 in str(e.value)
    assert_good_load_works(art)


def test_missing_cubin(art):
    obj = features(art)
    step = obj["kernels"]["record"]["impl"]["steps"][0]
    step["cubin"] = "absent.cubin"
    with pytest.raises(KernelArtifactError) as e:
        load(art, obj)
    print(e.value)
    assert "cubin `absent.cubin`: cannot read" in str(e.value)
    assert "kernel `record` step 0" in str(e.value)
    assert_good_load_works(art)


def test_wrong_parameter_layout(art):
    obj = features(art)
    # pinned to dup_a.cubin, whose dup takes (ptr, i32): declaring (ptr, i64) must fail
    k = obj["kernels"]["dupb"]
    k["params"] = ["out buffer<f32>", "i64"]
    step = k["impl"]["steps"][0]
    step.update(params=["out buffer<f32>", "i64"], args=[{"arg": 0}, {"arg": 1}], cubin="dup_a.cubin")
    obj["programs"]["main"]["dispatches"][8]["args"].pop()
    with pytest.raises(KernelArtifactError) as e:
        load(art, obj)
    print(e.value)
    msg = str(e.value)
    assert "kernel `dupb` step 0 (`dup`)" in msg
    assert "declared params have 2 params, sizes [8, 8]" in msg and "sizes [8, 4]" in msg
    assert_good_load_works(art)


def test_missing_and_misshaped_weight(art):
    empty = write_safetensors(art["root"] / "empty.safetensors",
                              {"other": st_tensor(np.zeros(3, np.float32))})
    with pytest.raises(WeightArtifactError, match="weight `w`: not found"):
        load(art, weights=[empty])
    bad = write_safetensors(art["root"] / "bad.safetensors",
                            {"w": st_tensor(np.zeros((4, 4), np.float32))})
    with pytest.raises(WeightArtifactError, match=r"weight `w`: shape is \[4, 4\]"):
        load(art, weights=[bad])
    assert_good_load_works(art)


# --- the cuBLASLt externs -------------------------------------------------------------------

def test_externs_against_float64(art):
    n, k = 384, 256
    rng = np.random.default_rng(1)
    w1 = to_bf16(rng.standard_normal((n, k)).astype(np.float32))
    wcat = to_bf16(rng.standard_normal(n * k + 8).astype(np.float32))
    wfile = write_safetensors(art["root"] / "gemm.safetensors",
                              {"w1": st_tensor(w1, "BF16"), "wcat": st_tensor(wcat, "BF16")})
    path = write_manifest(art, gm.gemm(n, k), "gemm.json")
    W1 = from_bf16(w1).astype(np.float64)
    W2 = from_bf16(wcat[1:1 + n * k]).astype(np.float64).reshape(n, k)
    with Runtime.load(path, weights=[wfile]) as r:
        for m in (1, 8, 33, 64):
            a = to_bf16(rng.standard_normal((m, k)).astype(np.float32))
            A = from_bf16(a).astype(np.float64)
            r.write("a", a)
            r.run("main", {"m": m}, graph=False)
            c1, c2 = (from_bf16(r.read(b)).astype(np.float64) for b in ("c1", "c2"))
            ref1, ref2 = A @ W1.T, A @ W1.T + A @ W2.T
            e1 = np.linalg.norm(c1 - ref1) / np.linalg.norm(ref1)
            e2 = np.linalg.norm(c2 - ref2) / np.linalg.norm(ref2)
            print(f"m={m}: cublaslt_bf16_tn rel err {e1:.2e}, _acc rel err {e2:.2e}")
            assert e1 < 1e-2 and e2 < 1e-2
            eager = (r.read("c1").tobytes(), r.read("c2").tobytes())
            r.run("main", {"m": m}, graph=True)
            assert (r.read("c1").tobytes(), r.read("c2").tobytes()) == eager
        print(r.summary())


def test_copy_and_read_async_feed_outputs_back_on_the_device(art):
    """decode's pattern: an output copied into the next run's input on the device, reads
    queued behind the runs and waited later (a third read reuses the first's slot)."""
    with load(art) as r:
        x = np.random.default_rng(3).standard_normal((5, 16)).astype(np.float32)
        r.write("x", x)
        r.run("main", {"tokens": 5})           # sval = 2x
        pending = []
        for _ in range(3):
            r.copy("x", "sval")                 # x <- sval, ordered after the run
            r.run("main", {"tokens": 5})
            pending.append(r.read_async("sval"))
        got = [p.wait() for p in reversed(pending)][::-1]
        for i, g in enumerate(got):
            np.testing.assert_array_equal(g, np.float32(2 ** (i + 2)) * x)
        assert pending[0].wait() is got[0]     # the same array on every wait
        with pytest.raises(CallerError, match="output buffer"):
            r.copy("sval", "x")
        with pytest.raises(CallerError, match=r"dtypes differ"):
            r.copy("x", "g")
        r.run("main", {"tokens": 5})
        lost = r.read_async("sval")
    with pytest.raises(CallerError, match="closed before this read was waited for"):
        lost.wait()


@pytest.mark.parametrize("copy_kernel", [True, False])
@pytest.mark.parametrize("graph", [True, False])
def test_a_sequence_of_runs_and_copies_equals_the_calls_one_by_one(art, graph, copy_kernel):
    """``run_sequence``: copy, run, copy, run as one graph (or step by step) computes what
    the four calls compute, and replays (x ← sval twice a sequence: 4x a replay); the copies
    by the runtime's copy kernel or as memcpys."""
    from kern_runtime import Copy, Run
    ops = (Copy.of("x", "sval"), Run.of("main", {"tokens": 5}),
           Copy.of("x", "sval"), Run.of("main", {"tokens": 5}))
    with load(art) as r:
        x = np.random.default_rng(4).standard_normal((5, 16)).astype(np.float32)
        r.write("x", x)
        r.run("main", {"tokens": 5})           # sval = 2x
        for rep in range(3):
            r.run_sequence(ops, graph=graph, copy_kernel=copy_kernel)
            np.testing.assert_array_equal(r.read("sval"), np.float32(2 ** (3 + 2 * rep)) * x)
        assert any(g.program == "[copy+main+copy+main]" for g in r.graphs) == graph


def test_the_copy_kernel_copies_odd_and_aligned_segments(art):
    """``Device.copies`` directly, inside buffer x: the word path (4-aligned), the byte path
    (odd address and length) and a third segment, in one launch."""
    from kern_runtime.cuda.memory import PinnedBuffer
    with load(art) as r:
        dev, st = r._dev, r._stream
        base, n = r.address("x"), r.plan.buffers["x"].nbytes
        assert n >= 512
        host = PinnedBuffer(512)
        try:
            src = (np.arange(512) * 7 % 251).astype(np.uint8)
            host.array[:] = src
            dev.h2d(base, host.addr, 512, st)
            segs = [(base + 256, base, 64), (base + 401, base + 5, 33), (base + 480, base + 100, 8)]
            dev.copies(segs, st, "test").run()
            host.array[:] = 0
            dev.d2h(host.addr, base, 512, st)
            st.synchronize()
            want = src.copy()
            for d, a, m in segs:
                want[d - base:d - base + m] = src[a - base:a - base + m]
            np.testing.assert_array_equal(host.array, want)
        finally:
            host.free()
