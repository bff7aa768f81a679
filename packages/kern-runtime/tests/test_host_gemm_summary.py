import hashlib
import json
import subprocess
import sys

import kern_manifest as km
import numpy as np
import pytest

from krt_helpers import EXAMPLES, st_tensor, write_safetensors
from kern_runtime import from_bf16, prepare, to_bf16
from kern_runtime.artifacts import Resolution
from kern_runtime.errors import CallerError, KernelArtifactError, ManifestProblem, WeightArtifactError
from kern_runtime.gemm import OP_N, OP_T, pointer_alignment, row_major_tn
from kern_runtime.hostdata import HOST_DTYPES, host_view
from kern_runtime.memory_plan import plan_memory
from kern_runtime.summary import GraphInfo, WeightsInfo, render_summary

TOY = EXAMPLES / "toy" / "manifest.json"


def toy_vm():
    return km.load(TOY)


# --- host data ---------------------------------------------------------------------------

def test_bf16_round_trip_and_rounding():
    x = np.array([1.0, -2.5, 3.140625, 1e-3, 65504.0, 0.0, -0.0], np.float32)
    bits = to_bf16(x)
    assert bits.dtype == np.uint16
    assert from_bf16(bits).tolist() == pytest.approx([1.0, -2.5, 3.140625, 1e-3, 65504.0, 0, 0], rel=4e-3)
    # round to nearest even: 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125 -> 1.0
    assert from_bf16(to_bf16(np.float32(1 + 2**-8)))[()] == 1.0
    assert from_bf16(to_bf16(np.float32(1 + 3 * 2**-8)))[()] == 1.015625
    assert np.isnan(from_bf16(to_bf16(np.float32("nan"))))


def test_host_view_rules():
    vm = toy_vm()
    x = vm.manifest.buffers["x"]  # bf16 [tokens, 128], tokens <= 256
    v = host_view("x", x, np.zeros((3, 128), np.uint16), vm.sym_max)
    assert v.dtype == np.uint8 and v.nbytes == 3 * 128 * 2
    host_view("x", x, np.zeros(5, np.int16), vm.sym_max)  # prefix, raw bits
    with pytest.raises(CallerError, match="dtype float32 does not match the buffer's bf16"):
        host_view("x", x, np.zeros((3, 128), np.float32), vm.sym_max)
    with pytest.raises(CallerError, match="dimension 1"):
        host_view("x", x, np.zeros((3, 64), np.uint16), vm.sym_max)
    with pytest.raises(CallerError, match="do not fit"):
        host_view("x", x, np.zeros((257, 128), np.uint16), vm.sym_max)
    with pytest.raises(CallerError, match="numpy array"):
        host_view("x", x, [1, 2], vm.sym_max)
    y = vm.manifest.buffers["y"]
    with pytest.raises(CallerError, match="float64"):
        host_view("y", y, np.zeros(3), vm.sym_max)
    # non-contiguous input is made contiguous
    a = np.arange(512, dtype=np.float32).reshape(2, 256)[:, ::2]
    assert host_view("y", y, a, vm.sym_max).view(np.float32).tolist() == a.ravel().tolist()
    assert HOST_DTYPES["i64"] == np.dtype("<i8")


def test_host_view_checks_the_domain():
    """Inputs with a ``domain`` are checked element by element before anything is queued:
    inclusive min/max (the examples' position limit), and token slots of a state for
    ``index_into`` at the runtime's capacity."""
    from kern_manifest.schema import Buffer, Domain
    pos = Buffer(dtype="i64", shape=["tokens"], cls="input", domain=Domain(min=0, max=8191))
    host_view("positions", pos, np.array([0, 8191], np.int64), {"tokens": 4})
    with pytest.raises(CallerError) as ei:
        host_view("positions", pos, np.array([5, 8192, 9000], np.int64), {"tokens": 4})
    assert "element 1 is 8192, outside its domain [0, 8191]" in str(ei.value)
    with pytest.raises(CallerError, match="element 0 is -1"):
        host_view("positions", pos, np.array([-1], np.int64), {"tokens": 4})
    pages = Buffer(dtype="i32", shape=[4], cls="input", domain=Domain(index_into="kv", unit=16))
    host_view("pages", pages, np.array([0, 3, 1, 2], np.int32), {}, capacity=64)
    with pytest.raises(CallerError, match="element 1 is 4, outside the 64 token slots of state `kv`"):
        host_view("pages", pages, np.array([0, 4, 0, 0], np.int32), {}, capacity=64)


# --- GEMM mapping ------------------------------------------------------------------------

def _col_major(mem, rows, cols, ld):
    """The column-major rows×cols matrix with leading dimension ld stored in flat ``mem``."""
    return np.array([[mem[c * ld + r] for c in range(cols)] for r in range(rows)])


def test_row_major_tn_mapping_matches_cublas_semantics():
    rng = np.random.default_rng(0)
    m, n, k = 3, 5, 4
    A = rng.standard_normal((m, k))
    W = rng.standard_normal((n, k))
    p = row_major_tn(m, n, k, a=0x1000, w=0x2000, c=0x3000, accumulate=False)
    assert (p.transa, p.transb) == (OP_T, OP_N)
    assert p.a == 0x2000 and p.b == 0x1000 and p.c == 0x3000 and p.beta == 0.0
    # Emulate cuBLASLt: D = op(A) op(B), operands read column-major from their memory.
    opA = _col_major(W.ravel(), *p.a_layout).T      # transa = T
    opB = _col_major(A.ravel(), *p.b_layout)        # transb = N
    D = opA @ opB                                   # (n × m), column-major with ld = n
    rows, cols, ld = p.c_layout
    assert D.shape == (rows, cols) and ld == rows
    mem = np.empty(rows * cols)
    for c in range(cols):
        mem[c * ld:c * ld + rows] = D[:, c]
    np.testing.assert_allclose(mem.reshape(m, n), A @ W.T)   # row-major C[m, n]
    assert row_major_tn(m, n, k, 0, 0, 0, accumulate=True).beta == 1.0


def test_pointer_alignment():
    assert pointer_alignment(0x7F00_0000_0000) == 256
    assert pointer_alignment(0x1000 + 2) == 2
    assert pointer_alignment(0x1000 + 64) == 64
    k1 = row_major_tn(1, 4096, 2560, 0x1000, 0x2000, 0x3000, False).shape_key
    k2 = row_major_tn(1, 4096, 2560, 0x1002, 0x2000, 0x3000, False).shape_key
    k3 = row_major_tn(8, 4096, 2560, 0x1000, 0x2000, 0x3000, False).shape_key
    assert k1 != k2 and k1 != k3
    assert k1 == row_major_tn(1, 4096, 2560, 0x9000, 0x2000, 0x3000, False).shape_key


# --- prepare and summary -----------------------------------------------------------------

def toy_files(tmp_path, sha=True):
    obj = json.loads(TOY.read_text())
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "toy.cubin").write_bytes(b"CUBIN")
    step = obj["kernels"]["norm"]["impl"]["steps"][0]
    step["sha256"] = hashlib.sha256(b"CUBIN").hexdigest() if sha else "ab" * 32
    mpath = tmp_path / "m.json"
    mpath.write_text(json.dumps(obj))
    w = write_safetensors(tmp_path / "w.safetensors",
                          {"gamma": st_tensor(np.zeros(128, np.uint16), "BF16")})
    return mpath, tmp_path / "k", w


def test_prepare_ok(tmp_path):
    mpath, kdir, w = toy_files(tmp_path)
    p = prepare(mpath, kdir, [w], capacity=16)
    assert p.plan.capacity == 16 and [b.buffer for b in p.weights] == ["gamma"]
    assert set(p.cubins) == {"toy.cubin"} and p.search == ["toy.cubin"]
    p2 = prepare(p.vm, kdir, w, capacity=16)   # a single path is accepted too
    assert p2.weights[0].entry.name == "gamma"


def test_prepare_errors_name_who_acts(tmp_path):
    mpath, kdir, w = toy_files(tmp_path, sha=False)
    with pytest.raises(KernelArtifactError, match=r"^\[kernel artifact\]"):
        prepare(mpath, kdir, [w], capacity=16)
    (tmp_path / "ok").mkdir()
    mpath, kdir, w = toy_files(tmp_path / "ok")
    with pytest.raises(WeightArtifactError, match="weight `gamma`: not found"):
        prepare(mpath, kdir, [], capacity=16)
    with pytest.raises(CallerError, match="capacity"):
        prepare(mpath, kdir, [w])
    bad = json.loads(mpath.read_text())
    bad["buffers"]["unused"] = {"dtype": "f32", "shape": [4], "class": "workspace"}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ManifestProblem) as e:
        prepare(tmp_path / "bad.json", kdir, [w], capacity=16)
    assert str(e.value).startswith("[manifest]") and "unused" in str(e.value)
    with pytest.raises(CallerError):
        prepare(42, kdir, [w], capacity=16)


def test_summary_text():
    vm = toy_vm()
    plan = plan_memory(vm, 64)
    res = {("norm", 0): Resolution("norm", 0, "toy_rms_norm", "toy.cubin", True),
           ("energy", 0): Resolution("energy", 0, "toy_partial", "toy.cubin", False),
           ("energy", 1): Resolution("energy", 1, "toy_reduce", "toy.cubin", False)}
    text = render_summary(vm, plan, res, WeightsInfo(["w.safetensors"], 1, 256, 0.001, 2),
                          [GraphInfo("step", {"tokens": 1}, 3, 1.25)], device="device 0: X")
    for needle in ("manifest `toy`", "tokens ∈ [1, 256]", "cache: 512 B/token -> 32.00 KiB",
                   "weight", "toy_rms_norm <- toy.cubin (pinned)",
                   "toy_partial <- toy.cubin (found by layout)", "0:8 8:8 16:8 24:4",
                   "grid (ceil_div(tokens, 128), 1, 1) block (128, 1, 1) smem 2048",
                   "weights: 1 bound", "2 tensor(s) in the files unused",
                   "step (2 dispatches)", "step [tokens=1]: 3 launches"):
        assert needle in text, needle
    assert "states (capacity 64 tokens):" in text


def test_summary_fixed_state_has_no_capacity():
    import msgspec

    vm = toy_vm()
    fixed = msgspec.structs.replace(vm.manifest.states["cache"], bytes_per_token=0,
                                    bytes_fixed=4096)
    vm = km.check(msgspec.structs.replace(vm.manifest, states={"cache": fixed}))
    plan = plan_memory(vm, None)
    text = render_summary(vm, plan, {}, WeightsInfo([], 0, 0, 0.0, 0), [])
    assert "states (fixed size):" in text and "cache: 4096 B fixed -> 4.00 KiB" in text


def test_import_needs_no_gpu():
    code = ("import sys, kern_runtime; "
            "assert 'cuda.bindings.driver' not in sys.modules, 'driver imported eagerly'; "
            "print(kern_runtime.gpu_available()[0] in (True, False))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_runtime_load_reports_before_gpu(tmp_path):
    """Artifact problems are found by prepare(), before any device is touched."""
    from kern_runtime import Runtime
    mpath, kdir, w = toy_files(tmp_path, sha=False)
    with pytest.raises(KernelArtifactError):
        Runtime.load(mpath, kdir, weights=[w], capacity=4)


def test_host_dtypes_and_bf16_are_kern_weights():
    from kern_weights import arrays
    assert to_bf16 is arrays.f32_to_bf16 and from_bf16 is arrays.bf16_to_f32
    assert {d: t.itemsize for d, t in HOST_DTYPES.items()} == km.DTYPE_SIZES
    assert to_bf16(np.array([np.nan, -np.nan], np.float32)).tolist() == [0x7FC0, 0x7FC0]
