"""The Runtime on the null device (CPU, in CI): load order and release, refusals that queue
nothing, write and read extents, graph-cache keys, eager eviction, GEMM algorithm choice
before capture, close. The GPU tests (``test_gpu.py``) run the same manifests on a real GPU
for the bits."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

import krt_manifests as gm
from krt_helpers import st_tensor, write_safetensors
from krt_null import NullBackend, load_null, null_cubin
from kern_runtime import (CallerError, CudaError, KernelArtifactError, Runtime, runtime, scalars,
                          to_bf16)

#: Impl steps per run of the features manifest's `main` (10 dispatches, `twostep` has 2).
MAIN_STEPS = 11


def features_files(root, obj_edit=None, capacity=gm.CAPACITY):
    """Null cubins for tests/cu's kernels (their declared layouts), the features manifest
    pinned to them, its weight file; returns (manifest path, kernels dir, weights)."""
    k = root / "kernels"
    probe = gm.features("0" * 64)
    steps = {name: kern["impl"]["steps"] for name, kern in probe["kernels"].items()}
    main = null_cubin(k / "main.cubin", {s["symbol"]: s["params"] for n, ss in steps.items()
                                          if n not in ("dupa", "dupb") for s in ss})
    null_cubin(k / "dup_a.cubin", {"dup": steps["dupa"][0]["params"]})
    null_cubin(k / "dup_b.cubin", {"dup": steps["dupb"][0]["params"]})
    obj = gm.features(hashlib.sha256(main.read_bytes()).hexdigest())
    if obj_edit:
        obj_edit(obj)
    (root / "m.json").write_text(json.dumps(obj))
    w = np.linspace(-2, 2, 16, dtype=np.float32)
    wfile = write_safetensors(root / "w.safetensors", {"w": st_tensor(w)})
    return root / "m.json", k, [wfile]


@pytest.fixture
def loaded(tmp_path):
    m, k, w = features_files(tmp_path)
    rt, dev = load_null(m, k, w, capacity=gm.CAPACITY)
    yield rt, dev
    rt.close()


def since(dev, n, *ops):
    """The calls after the first ``n`` (those of ``ops`` only, if given)."""
    return [c for c in dev.calls[n:] if not ops or c[0] in ops]


# -- load and its failures ---------------------------------------------------------------

def test_load_opens_lays_out_uploads_and_resolves(loaded):
    rt, dev = loaded
    plan, base = rt.plan, rt.addresses.buffers
    assert dev.calls[:5] == [("open", 0), ("stream", 1), ("arena", plan.total, plan.align, "arena"),
                             ("zero", dev.base, plan.total), ("modules", ("dup_a.cubin", "dup_b.cubin",
                                                                         "main.cubin"))]
    assert dev.ops("smem") == [("smem", ("main.cubin", "smem_reverse"), 65536)]
    # the weight goes through pinned staging, which is freed only after the copies finished
    i = dev.calls.index(("h2d", base["w"], 64, "weight `w` upload"))
    assert [c[0] for c in dev.calls[i:]] == ["h2d", "record", "sync", "sync", "destroy event",
                                             "destroy event", "free pinned", "free pinned", "sync"]
    assert dev.calls[-1] == ("sync", "load")
    np.testing.assert_array_equal(dev.view(base["w"], 64).view(np.float32),
                                  np.linspace(-2, 2, 16, dtype=np.float32))
    r = rt.resolutions
    assert (r[("dupa", 0)].module, r[("dupb", 0)].module) == ("dup_a.cubin", "dup_b.cubin")
    assert r[("twostep", 1)].pinned and not r[("dupa", 0)].pinned
    assert rt.stream_handle == 1 and rt.address("st") == rt.addresses.states["st"]


def test_device_index_reaches_the_backend(tmp_path):
    m, k, w = features_files(tmp_path)
    two = NullBackend(count=2)
    with Runtime.load(m, k, weights=w, capacity=gm.CAPACITY, device=1, backend=two,
                      progress=None) as rt:
        assert "device 1: null device" in rt.summary()
    assert two.devices[0].ordinal == 1 and two.devices[0].released
    with pytest.raises(CudaError, match="device 3 requested, 2 present"):
        Runtime.load(m, k, weights=w, capacity=gm.CAPACITY, device=3, backend=two)


def test_unknown_backend_is_refused_before_any_work(tmp_path):
    with pytest.raises(CallerError, match=r"unknown backend 'rocm'[\s\S]*backends: cuda"):
        Runtime.load(tmp_path / "absent.json", backend="rocm")


def _dupb_takes_i64_but_is_pinned_to_dup_a(obj):
    k = obj["kernels"]["dupb"]
    k["params"] = ["out buffer<f32>", "i64"]
    k["impl"]["steps"][0].update(params=["out buffer<f32>", "i64"], args=[{"arg": 0}, {"arg": 1}],
                                 cubin="dup_a.cubin")
    obj["programs"]["main"]["dispatches"][8]["args"].pop()


@pytest.mark.parametrize("edit, capacity, error, message", [
    (_dupb_takes_i64_but_is_pinned_to_dup_a, gm.CAPACITY, KernelArtifactError,
     r"kernel `dupb` step 0 \(`dup`\): declared params have 2 params, sizes \[8, 8\], but the "
     r"function in cubin `dup_a.cubin` has 2 params, sizes \[8, 4\]"),
    (None, gm.CAPACITY // 2, CallerError,   # state `st` is then one region, st.w1 uses two
     r"argument 1 uses state `st` at byte offset 2048, but at capacity 32 the state has 2048"),
])
def test_a_load_failing_on_the_device_releases_everything(tmp_path, edit, capacity, error,
                                                          message):
    m, k, w = features_files(tmp_path, edit)
    backend = NullBackend()
    with pytest.raises(error, match=message):
        Runtime.load(m, k, weights=w, capacity=capacity, backend=backend)
    dev = backend.devices[0]
    assert [c[0] for c in dev.calls[-4:]] == ["unload", "free arena", "destroy stream", "release"]


def test_a_file_the_device_cannot_load_is_a_kernel_artifact_error(tmp_path):
    m, k, w = features_files(tmp_path)
    (k / "dup_b.cubin").write_bytes(b"\x7fELF not a null cubin")
    with pytest.raises(KernelArtifactError, match="cubin `dup_b.cubin`: the null device cannot"):
        load_null(m, k, w, capacity=gm.CAPACITY)


# -- refusals ----------------------------------------------------------------------------

def test_refusals_queue_nothing_and_the_runtime_stays_usable(loaded):
    rt, dev = loaded
    refused = [
        (lambda: rt.run("main", {"tokens": 65}), "program `main`"),
        (lambda: rt.run("main", {"tokens": 0}), "program `main`"),
        (lambda: rt.run("main", {"tokenz": 3}), "program `main`"),
        (lambda: rt.run("main", {}), "program `main`"),
        (lambda: rt.run("main", {"tokens": True}), "symbol `tokens` must be an integer"),
        (lambda: rt.capture("main", {"tokens": 99}), "program `main`"),
        (lambda: rt.run("nope", {"tokens": 1}), "unknown program `nope`"),
        (lambda: rt.write("y", np.zeros((1, 16), np.float32)), "`y` is an output buffer"),
        (lambda: rt.write("w", np.zeros(16, np.float32)), "`w` is a weight buffer"),
        (lambda: rt.write("x", np.zeros((1, 16))), "float64"),
        (lambda: rt.write("x", np.zeros((65, 16), np.float32)), "do not fit"),
        (lambda: rt.read("nope"), "unknown buffer `nope`"),
        (lambda: rt.read("y", {"tokens": 65}), "program `read `y``"),
        (lambda: rt.address("nope"), "unknown buffer or state `nope`"),
    ]
    for call, message in refused:
        n = len(dev.calls)
        with pytest.raises(CallerError, match=message):
            call()
        assert dev.calls[n:] == [], message
    rt.write("x", np.ones((3, 16), np.float32))
    rt.run("main", {"tokens": 3})
    assert dev.ops("graph") == [("graph", "program `main`", MAIN_STEPS)]


# -- write and read extents --------------------------------------------------------------

def test_write_copies_the_prefix_through_one_staging_buffer(loaded):
    rt, dev = loaded
    x = rt.addresses.buffers["x"]
    n = len(dev.calls)
    a = np.arange(48, dtype=np.float32).reshape(3, 16)
    rt.write("x", a)
    assert since(dev, n) == [("pinned", 4096), ("event", False), ("h2d", x, 192, "write `x`"),
                             ("record", 1)]
    np.testing.assert_array_equal(dev.view(x, 192).view(np.float32).reshape(3, 16), a)
    assert not dev.view(x + 192, 4096 - 192).any()
    n = len(dev.calls)
    rt.write("x", np.full((64, 16), 2, np.float32))        # the whole buffer
    rt.write("x", np.zeros((0, 16), np.float32))           # nothing to copy, still ordered
    # the staging buffer is reused, after waiting for the copy that last read it
    assert since(dev, n) == [("wait event",), ("h2d", x, 4096, "write `x`"), ("record", 1),
                             ("wait event",), ("record", 1)]
    rt.write("c", np.ones((2, 16), np.float32))            # carry buffers are writable too
    assert dev.ops("h2d")[-1] == ("h2d", rt.addresses.buffers["c"], 128, "write `c`")


def scalar_files(root):
    """The features manifest with i64 and i32 inputs ``p64`` and ``n32``, read by a
    program ``peek`` of a null kernel of their own."""
    params = ["in buffer<i64>", "in buffer<i32>"]
    null_cubin(root / "kernels" / "peek.cubin", {"peek": params})

    def edit(obj):
        obj["buffers"]["p64"] = {"dtype": "i64", "shape": ["tokens"], "class": "input"}
        obj["buffers"]["n32"] = {"dtype": "i32", "shape": ["tokens"], "class": "input"}
        obj["kernels"]["peek"] = {"params": params, "impl": {"steps": [{
            "symbol": "peek", "params": params, "grid": [1, 1, 1], "block": [32, 1, 1],
            "args": [{"arg": 0}, {"arg": 1}], "cubin": "peek.cubin"}]}}
        obj["programs"]["peek"] = {"dispatches": [{"label": "peek", "kernel": "peek", "args": [
            {"buf": "p64"}, {"buf": "n32"}]}]}
    return features_files(root, edit)


def test_write_scalars_is_one_store_operation_of_the_values_words(tmp_path):
    m, k, w = scalar_files(tmp_path)
    rt, dev = load_null(m, k, w, capacity=gm.CAPACITY)
    p, c = rt.addresses.buffers["p64"], rt.addresses.buffers["n32"]
    n = len(dev.calls)
    rt.write_scalars({"p64": -(2**40) - 3, "n32": 2**31 - 1})
    v = -(2**40) - 3
    assert since(dev, n) == [("write_words", ((p, v & 0xFFFFFFFF), (p + 4, (v >> 32) & 0xFFFFFFFF),
                                              (c, 2**31 - 1)), "write_scalars `p64`, `n32`")]
    assert dev.view(p, 8).tobytes() == np.array([v], np.int64).tobytes()
    assert dev.view(c, 4).tobytes() == np.array([2**31 - 1], np.int32).tobytes()
    # the A/B switch: the same bytes through write's staging and copies
    rt.stream_writes = False
    n = len(dev.calls)
    rt.write_scalars({"p64": 12, "n32": -1})
    assert [x[0] for x in since(dev, n, "h2d", "write_words")] == ["h2d", "h2d"]
    assert dev.view(p, 8).tobytes() == np.array([12], np.int64).tobytes()
    assert dev.view(c, 4).tobytes() == np.array([-1], np.int32).tobytes()
    rt.close()


def test_write_scalars_refuses_more_words_than_one_operation_takes(tmp_path, monkeypatch):
    m, k, w = scalar_files(tmp_path)
    rt, dev = load_null(m, k, w, capacity=gm.CAPACITY)
    monkeypatch.setattr(scalars, "MAX_WORDS", 2)           # p64 and n32 make 3 words
    n = len(dev.calls)
    with pytest.raises(CallerError, match="3 words in one operation, at most 2"):
        rt.write_scalars({"p64": 1, "n32": 2})
    assert dev.calls[n:] == []
    rt.write_scalars({"p64": 1})
    rt.close()


def test_write_scalars_falls_back_to_copies_where_stores_are_not_supported(tmp_path):
    m, k, w = scalar_files(tmp_path)
    rt, dev = load_null(m, k, w, capacity=gm.CAPACITY)

    def unsupported(words, stream, where=None):
        raise CudaError("cuStreamBatchMemOp", "CUDA_ERROR_NOT_SUPPORTED", where=where)
    dev.write_words = unsupported
    n = len(dev.calls)
    rt.write_scalars({"p64": 5, "n32": 6})
    assert rt.stream_writes is False and len(since(dev, n, "h2d")) == 2
    assert dev.view(rt.addresses.buffers["p64"], 8).tobytes() == np.int64(5).tobytes()
    assert dev.view(rt.addresses.buffers["n32"], 4).tobytes() == np.int32(6).tobytes()

    def broken(words, stream, where=None):
        raise CudaError("cuStreamBatchMemOp", "CUDA_ERROR_ILLEGAL_ADDRESS", where=where)
    dev.write_words, rt.stream_writes = broken, True
    with pytest.raises(CudaError, match="ILLEGAL_ADDRESS"):   # any other failure surfaces
        rt.write_scalars({"p64": 5})
    rt.close()


@pytest.mark.parametrize("values, message", [
    ({"p64": 1, "x": 2}, "write_scalars takes i32 and i64 buffers, not f32"),
    ({"n32": 2**31}, "2147483648 is not an i32 value"),
    ({"p64": 1.5}, "1.5 is not an i64 value"),
    ({"n32": True}, "True is not an i32 value"),
    ({"p64": 1, "g": 2}, "only input and carry buffers are written by the caller"),
])
def test_write_scalars_refuses_before_queueing_anything(tmp_path, values, message):
    m, k, w = scalar_files(tmp_path)
    rt, dev = load_null(m, k, w, capacity=gm.CAPACITY)
    n = len(dev.calls)
    with pytest.raises(CallerError, match=message):
        rt.write_scalars(values)
    assert dev.calls[n:] == []
    rt.close()


def test_read_shape_follows_symbols_then_the_last_run_then_the_maxima(loaded):
    rt, dev = loaded
    y = rt.addresses.buffers["y"]
    dev.view(y, 4096)[:] = np.arange(4096) % 251
    with pytest.raises(CallerError, match=r"read `y`: no run since the runtime was loaded "
                       r"wrote `y`.*\n.*help: run a program that writes `y` first \(`main`\)"):
        rt.read("y")                                       # an output before any run
    assert rt.read("x").shape == (64, 16)                  # no run yet: the maxima
    rt.run("main", {"tokens": 5}, graph=False)
    rt.read("y")                                           # stages y's reads from here on
    n = len(dev.calls)
    got = rt.read("y")
    assert got.shape == (5, 16) and got.dtype == np.float32
    assert since(dev, n) == [("d2h", y, 320, "read `y`"), ("sync", "read `y`")]  # staging reused
    assert got.tobytes() == dev.view(y, 320).tobytes()
    assert rt.read("y", {"tokens": 2}).tobytes() == dev.view(y, 128).tobytes()
    assert rt.read("lit").shape == (8,) and rt.read("g").dtype == np.int32


def test_a_large_read_goes_straight_to_the_callers_array(loaded, monkeypatch):
    rt, dev = loaded
    y = rt.addresses.buffers["y"]
    dev.view(y, 4096)[:] = np.arange(4096) % 7
    monkeypatch.setattr(runtime, "PINNED_READ_MAX", 100)
    rt.run("main", {"tokens": 2}, graph=False)
    n = len(dev.calls)
    got = rt.read("y", {"tokens": 2})                     # 128 bytes > 100
    assert got.tobytes() == dev.view(y, 128).tobytes()
    assert [c[0] for c in since(dev, n)] == ["sync", "d2h", "sync"]


# -- graphs and the eager cache ----------------------------------------------------------

def test_graphs_are_keyed_by_program_and_symbol_values(loaded):
    rt, dev = loaded
    rt.run("main", {"tokens": 3})
    rt.write("x", np.ones((3, 16), np.float32))           # H2D between replays, outside the graph
    rt.run("main", {"tokens": 3})
    assert dev.ops("capture") == [("capture", "program `main` {'tokens': 3}", MAIN_STEPS)]
    assert len(dev.ops("graph")) == 2
    g = rt.capture("main", {"tokens": 3})
    assert rt.capture("main", {"tokens": 3}) is g and len(dev.ops("capture")) == 1
    rt.run("main", {"tokens": 4})
    rt.run("produce", {"tokens": 4})
    assert [(i.program, dict(i.symbols), i.nodes) for i in rt.graphs] == [
        ("main", {"tokens": 3}, MAIN_STEPS), ("main", {"tokens": 4}, MAIN_STEPS),
        ("produce", {"tokens": 4}, 1)]
    # an eager run of a captured key reuses its bound steps: launches, no binding
    n = len(dev.calls)
    rt.run("main", {"tokens": 3}, graph=False)
    assert [c[0] for c in since(dev, n)] == ["launch"] * MAIN_STEPS


def test_eager_cache_evicts_the_least_recently_used_key(loaded):
    rt, dev = loaded

    def binds(tokens):
        n = len(dev.calls)
        rt.run("main", {"tokens": tokens}, graph=False)
        return len(since(dev, n, "bind"))
    assert [binds(t) for t in range(1, runtime.EAGER_CACHE + 1)] == [MAIN_STEPS] * 32
    assert binds(1) == 0                                   # a hit, now the most recent
    assert binds(runtime.EAGER_CACHE + 1) == MAIN_STEPS    # evicts tokens=2, the oldest
    assert binds(1) == 0 and binds(3) == 0
    assert binds(2) == MAIN_STEPS
    launches = [c for c in dev.ops("launch") if "dispatch 9" in c[1]]   # gridid: ceil(16t/32)
    assert launches[-1][2] == (1, 1, 1) and launches[-2][2] == (2, 1, 1)


def test_gemm_algorithms_are_chosen_before_capture(tmp_path):
    n, k = 384, 256
    rng = np.random.default_rng(1)
    wfile = write_safetensors(tmp_path / "gemm.safetensors", {
        "w1": st_tensor(to_bf16(rng.standard_normal((n, k)).astype(np.float32)), "BF16"),
        "wcat": st_tensor(to_bf16(rng.standard_normal(n * k + 8).astype(np.float32)), "BF16")})
    (tmp_path / "gemm.json").write_text(json.dumps(gm.gemm(n, k)))
    rt, dev = load_null(tmp_path / "gemm.json", weights=[wfile])
    with rt:
        assert dev.ops("gemm") == [("gemm",)] and dev.ops("modules") == [("modules", ())]
        rt.run("main", {"m": 8})
        ops = [c[0] for c in dev.calls if c[0] in ("choose", "capture", "graph")]
        # c1 and c2 share a problem; c2+'s weight is only 2-byte aligned: a second choice
        assert ops == ["choose", "choose", "capture", "graph"]
        rt.run("main", {"m": 8}, graph=False)
        assert [c[1] for c in dev.ops("matmul")] == [
            "program `main` dispatch 0 (`c1`), kernel `gemm` step 0 (`extern:cublaslt_bf16_tn`)",
            "program `main` dispatch 1 (`c2`), kernel `gemm` step 0 (`extern:cublaslt_bf16_tn`)",
            "program `main` dispatch 2 (`c2+`), kernel `gemm_acc` step 0 "
            "(`extern:cublaslt_bf16_tn_acc`)"]
        a, b, c = (p for *_, p in dev.ops("matmul"))
        assert (a.beta, c.beta) == (0.0, 1.0) and c.a == rt.addresses.buffers["wcat"] + 2
        assert "null GEMM" in rt.summary() and "GEMM n=384 m=8 k=256" in rt.summary()
    assert dev.ops("close gemm") == [("close gemm",)]


# -- introspection and teardown ----------------------------------------------------------

def test_summary_lists_everything(loaded):
    rt, _ = loaded
    rt.run("main", {"tokens": 2})
    text = rt.summary()
    for needle in ("manifest `kern-runtime-gpu-test`", "device 0: null device", "st: 64 B/token",
                   "mul_w <- main.cubin (pinned)", "dup <- dup_a.cubin (found by layout)",
                   "dup <- dup_b.cubin (found by layout)", "smem 65536", "weights: 1 bound",
                   "graphs captured:"):
        assert needle in text, needle
    assert rt.graphs[0].nodes == MAIN_STEPS


def test_close_releases_everything_once_in_order(loaded):
    rt, dev = loaded
    rt.write("x", np.ones((2, 16), np.float32))
    rt.run("main", {"tokens": 2})
    rt.read("y")
    lost = rt.read_async("sval")
    n = len(dev.calls)
    rt.close()
    rt.close()                                             # idempotent
    assert [c[0] for c in since(dev, n)] == [
        "sync", "destroy graph",
        "free pinned", "destroy event",                    # write staging
        "free pinned",                                     # read staging
        "free pinned", "destroy event", "free pinned", "destroy event",   # read_async slots
        "unload", "free arena", "destroy stream", "release"]
    for call in (lambda: rt.run("main", {"tokens": 1}), lambda: rt.write("x", np.ones((1, 16))),
                 lambda: rt.read("y"), lambda: rt.copy("x", "sval"), rt.synchronize,
                 lambda: rt.capture("main", {"tokens": 1}), lambda: rt.address("x")):
        with pytest.raises(CallerError, match="this runtime was closed"):
            call()
    with pytest.raises(CallerError, match="closed before this read was waited for"):
        lost.wait()


# -- programmatic dependent launch -------------------------------------------------------

def _pdl_on_second_twostep_step(obj):
    obj["kernels"]["twostep"]["impl"]["steps"][1]["pdl"] = True


@pytest.mark.parametrize("pdl", [True, False])
def test_a_pdl_step_launches_with_pdl_only_when_the_runtime_allows_it(tmp_path, pdl):
    m, k, w = features_files(tmp_path, _pdl_on_second_twostep_step)
    rt, dev = load_null(m, k, w, capacity=gm.CAPACITY, pdl=pdl)
    try:
        rt.run("main", {"tokens": 3}, graph=False)
        marked = {where for where, on in dev.pdl.items() if on}
        assert len(dev.pdl) == MAIN_STEPS
        if pdl:
            assert len(marked) == 1 and "kernel `twostep` step 1" in next(iter(marked))
        else:
            assert marked == set()
    finally:
        rt.close()


def test_a_cuda_error_keeps_its_status_name():
    e = CudaError("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", "4 GiB", where="arena")
    assert (e.call, e.code) == ("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY")
    assert str(e) == "[CUDA] arena: cuMemAlloc failed with CUDA_ERROR_OUT_OF_MEMORY (4 GiB)"
