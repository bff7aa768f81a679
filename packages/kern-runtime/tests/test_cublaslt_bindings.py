"""cuBLASLt through nvmath's bindings, without a GPU.

- The enum values and struct layouts the bindings supply are those of ``cublasLt.h``
  (CUDA 13) that the hand-declared ctypes version used.
- :class:`CublasLt` end to end against a stand-in ``libcublasLt.so.13``
  (``fake_cublaslt.c``, built with the C compiler; skipped without one), the driver's part
  (allocations, events, memsets) faked in Python: the descriptor, layouts, preference
  attributes, heuristic filtering, timed choice, the prepared call's arguments, β ∈ {0, 1},
  a failed call's error and the release. In a child process: the bindings load their library
  once per process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kern_runtime.cuda import cublaslt as m

HERE = Path(__file__).parent


def test_values_are_cublasLt_h():
    assert (m.COMPUTE_32F, m.R_32F, m.R_16BF) == (68, 0, 14)
    assert (m.DESC_TRANSA, m.DESC_TRANSB, m.PREF_MAX_WORKSPACE) == (3, 4, 1)
    assert m.PREF_MIN_ALIGN == (5, 6, 7, 8)
    lt = m.lt
    assert lt.get_matmul_desc_attribute_dtype(m.DESC_TRANSA) is np.int32
    assert lt.get_matmul_preference_attribute_dtype(m.PREF_MAX_WORKSPACE) is np.uint64
    assert all(lt.get_matmul_preference_attribute_dtype(a) is np.uint32 for a in m.PREF_MIN_ALIGN)
    # cublasLtMatmulHeuristicResult_t = {algo: uint64[8], workspaceSize, state, wavesCount, reserved[4]}
    h = m.HEURISTIC
    assert h.itemsize == 96 and lt.matmul_algo_dtype.itemsize == 64
    assert {k: v[1] for k, v in h.fields.items()} == {
        "algo": 0, "workspace_size": 64, "state": 72, "waves_count": 76, "reserved": 80}


DRIVER = r"""
import ctypes, json, sys
ctypes.CDLL(sys.argv[1])  # loaded first: cuda.pathfinder's first step finds it
from kern_runtime.cuda import cublaslt as m
from kern_runtime.errors import CudaError
from kern_runtime.gemm import row_major_tn

addrs = iter(range(0x7000_0000, 0x8000_0000, 0x100_0000))
m.device_alloc = lambda n, where=None: next(addrs)
m.device_free = lambda a: None
m.call = lambda *a, **k: None
times = iter([5, 4, 6, 3, 7] * 10)

class Event:
    def record(self, s): pass
    def synchronize(self): pass
    def elapsed_ms(self, since): return next(times) / 1000
    def destroy(self): pass

class Stream:
    id = handle = 0xabc
    def synchronize(self, where=None): pass

m.Event = Event
lt = m.CublasLt(Stream())
out = {"library": lt.library, "describe": lt.describe(), "workspace": lt.workspace}
print("-- acc")
p = row_major_tn(m=8, n=64, k=32, a=0x10010, w=0x20000, c=0x30008, accumulate=True)
lt.prepare(p, "acc").run()
out["algos"] = [(int(h["algo"]["data_"][0][0]), us, n) for h, us, n in lt.algos.values()]
print("-- plain")
lt.prepare(row_major_tn(m=8, n=64, k=32, a=0x10010, w=0x20000, c=0x30008, accumulate=False),
           "plain").run()
print("-- error")
try:
    m.ExternLaunch(lt, p, lt._candidates(p, "x")[1], "bad step").run()
except CudaError as e:
    out["error"] = e.render()
print("-- close")
lt.close()
print("JSON " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler for the stand-in libcublasLt")
    d = tmp_path_factory.mktemp("fake_cublaslt")
    (d / "drv").mkdir()
    lib = d / "libcublasLt.so.13"
    src = str(HERE / "fake_cublaslt.c")
    for target, soname in ((lib, "libcublasLt.so.13"), (d / "drv" / "libcuda.so.1", "libcuda.so.1")):
        subprocess.run([cc, "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(target), src],
                       check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=str(d / "drv"))
    r = subprocess.run([sys.executable, "-c", DRIVER, str(lib)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    out = json.loads(lines[-1].removeprefix("JSON "))
    sections, cur = {}, "init"
    for ln in lines[:-1]:
        if ln.startswith("-- "):
            cur = ln[3:]
        else:
            sections.setdefault(cur, []).append(ln)
    return lib, out, sections


def test_descriptor_and_library(fake_run):
    lib, out, s = fake_run
    assert Path(out["library"]).resolve() == lib.resolve()
    assert out["describe"].startswith("cuBLASLt 13.1.1 (nvmath-python ")
    assert out["describe"].endswith("bindings), workspace 32 MiB")
    # compute 32F, scale 32F; transa = T, transb = N, as int32
    assert s["init"] == ["create", "desc 68 0", "desc_attr 3 4 1", "desc_attr 4 4 0"]


def test_heuristic_timed_choice_and_call(fake_run):
    _, out, s = fake_run
    acc = s["acc"]
    # workspace cap (uint64), then the alignments of W, A, C, C (uint32)
    assert acc[:6] == ["pref", f"pref_attr 1 8 {32 << 20}", "pref_attr 5 4 256", "pref_attr 6 4 16",
                       "pref_attr 7 4 8", "pref_attr 8 4 8"]
    # column-major: W k×n, A k×m, C n×m (bf16)
    assert acc[6:11] == ["layout 14 32 64 32", "layout 14 32 8 32", "layout 14 64 8 64",
                         "heuristic 16 96", "pref_destroy"]
    calls = [ln.split() for ln in acc[11:]]
    ws, stream = hex(out["workspace"]), "0xabc"
    timing = calls[:-1]
    # candidates 102 (state) and 103 (workspace) dropped; 100 warm-up + 5 timed; 101 fails its
    # warm-up and is skipped; all write the temporary output, never C
    assert [c[7] for c in timing] == ["100"] * 6 + ["101"]
    assert {c[5] for c in timing} == {c[6] for c in timing} and "0x30008" not in {c[5] for c in timing}
    assert out["algos"] == [[100, 5.0, 2]]  # median of the five timed runs, of 2 candidates
    assert calls[-1] == ["matmul", "1", "1", "0x20000", "0x10010", "0x30008", "0x30008", "100",
                         ws, str(32 << 20), stream]
    assert s["plain"][-1].split()[1:3] == ["1", "0"]  # β = 0


def test_failed_call_and_close(fake_run):
    _, out, s = fake_run
    assert out["error"] == ("[CUDA] bad step: cublasLtMatmul failed with CUBLAS_STATUS_NOT_SUPPORTED")
    assert s["close"] == ["layout_destroy"] * 3 + ["desc_destroy", "destroy"]
