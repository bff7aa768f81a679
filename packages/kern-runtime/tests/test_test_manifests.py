"""The manifests the GPU tests and the benchmark use must verify (checked without a GPU)."""

import importlib.util
import sys
from pathlib import Path

import kern_manifest as km

import krt_manifests as gm

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_runtime.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_runtime", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_runtime"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_gpu_test_manifests_verify():
    km.check(km.from_obj(gm.features("0" * 64)))
    km.check(km.from_obj(gm.gemm()))


def test_bench_manifests_verify():
    b = _bench()
    chain = km.check(km.from_obj(b.chain_manifest()))
    assert len(chain.manifest.programs["chain"].dispatches) == b.CHAIN
    g = km.check(km.from_obj(b.gemm_manifest()))
    assert len(g.manifest.programs["decode"].dispatches) == 36 * 4 + 1
    nbytes = sum(km.nbytes(x, g.sym_max) for n, x in g.manifest.buffers.items() if n.startswith("W"))
    assert abs(nbytes - 8.046e9) < 0.01e9
