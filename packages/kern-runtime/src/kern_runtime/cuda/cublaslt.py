"""cuBLASLt through NVIDIA's bindings (``nvmath.bindings.cublasLt``): the built-in GEMM externs.

One handle, one matmul descriptor (bf16 operands, f32 compute and scale, ``transa = T``,
``transb = N``), a 32 MiB workspace allocated at load, and host-side α = 1, β ∈ {0, 1}
(baked into a graph at capture). Matrix layouts are cached per (rows, cols, ld).

Algorithm choice, per distinct problem (layouts, β, operand alignments): ask the heuristic
for its top candidates, run each a few times on the problem's real operands writing a
temporary output — each timed run between its own pair of events, after a 128 MiB memset
that evicts the operands from L2 (and lets the host enqueue ahead, so host overhead is not
timed) — keep the one with the lowest median time, and cache the choice. It happens when a (program,
symbol values) is first bound — before any capture, since timing launches work on the
stream. The chosen algorithm is reused by eager and graph runs alike, so both compute the
same bits.

The bindings supply the entry points, the enum values and the struct layouts
(``matmul_heuristic_result_dtype``, the size of every attribute); host-side scalars, the
heuristic results and the chosen algorithm live in numpy arrays of those types, passed by
address. A failed call raises ``cuBLASLtError``, turned into :class:`CudaError` with the C
function's name and the status name.

The library: nvmath finds ``libcublasLt.so.13`` through ``cuda.pathfinder``, whose first
step is a copy already loaded in the process. :func:`_load_library` loads it before the
first binding call — through pathfinder (NVIDIA wheels, conda, the loader's path, CUDA_HOME),
else by the usual system names — so a toolkit in ``/usr/local/cuda/lib64`` that is not on
the loader's path is found too.
"""

from __future__ import annotations

import ctypes

import nvmath
import numpy as np
from nvmath.bindings import cublas
from nvmath.bindings import cublasLt as lt

from ..errors import CudaError
from ..gemm import OP_N, OP_T, LtProblem, pointer_alignment
from .driver import call
from .memory import Event, Stream, device_alloc, device_free

WORKSPACE_BYTES = 32 * 2**20
CANDIDATES = 16         # heuristic results timed per problem
TIMING_WARMUP = 1
TIMING_REPS = 5
#: Bytes overwritten before each timed run so that its weights come from DRAM, as in a
#: decode step (the H200's L2 is 50 MB; a decode GEMM's weight matrix fits in it).
L2_FLUSH_BYTES = 128 * 2**20
#: Tried in order when cuda.pathfinder does not find the library.
SYSTEM_PATHS = ("libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.13")

COMPUTE_32F = cublas.ComputeType.COMPUTE_32F
R_32F = nvmath.CudaDataType.CUDA_R_32F
R_16BF = nvmath.CudaDataType.CUDA_R_16BF
DESC_TRANSA = lt.MatmulDescAttribute.TRANSA
DESC_TRANSB = lt.MatmulDescAttribute.TRANSB
PREF_MAX_WORKSPACE = lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES
PREF_MIN_ALIGN = (lt.MatmulPreferenceAttribute.MIN_ALIGNMENT_A_BYTES,
                  lt.MatmulPreferenceAttribute.MIN_ALIGNMENT_B_BYTES,
                  lt.MatmulPreferenceAttribute.MIN_ALIGNMENT_C_BYTES,
                  lt.MatmulPreferenceAttribute.MIN_ALIGNMENT_D_BYTES)
HEURISTIC = lt.matmul_heuristic_result_dtype
_ALGO_OFFSET = HEURISTIC.fields["algo"][1]

#: Choices made in this process: (cuBLASLt version, problem shape key) -> (heuristic result,
#: microseconds, candidates timed). Every runtime of the process reuses them, so two loads
#: (PDL off and on, or manifests that differ in other kernels) run each GEMM with the same
#: algorithm and their outputs can be compared bit for bit.
_PROCESS_CHOICES: dict[tuple, tuple[np.ndarray, float, int]] = {}


def _load_library() -> str:
    """Load libcublasLt.so.13 (kept loaded for nvmath to find); returns where it came from."""
    tried = []
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        return load_nvidia_dynamic_lib("cublasLt").abs_path
    except Exception as e:  # fall through to the plain names
        tried.append(f"cuda.pathfinder: {e}")
    for name in SYSTEM_PATHS:
        try:
            ctypes.CDLL(name)
            return name
        except OSError as e:
            tried.append(f"{name}: {e}")
    raise CudaError("dlopen", "CUBLASLT_NOT_FOUND", "; ".join(tried),
                    help="install cuBLASLt 13 (the nvidia-cublas wheel or the CUDA toolkit)")


def status_name(status: int) -> str:
    try:
        return lt.get_status_name(status)
    except Exception:
        return f"status {status}"


def lt_call(name: str, fn, *args, where: str | None = None):
    """``fn(*args)``, its cuBLASLtError raised as :class:`CudaError` naming C function ``name``."""
    try:
        return fn(*args)
    except lt.cuBLASLtError as e:
        raise CudaError(name, status_name(e.status), where=where) from None


def _quiet(fn, handle: int) -> None:
    """A destroy call whose failure is ignored (release goes on)."""
    try:
        fn(handle)
    except lt.cuBLASLtError:
        pass


def _set_attribute(name: str, setter, dtype_of, obj: int, attr: int, value: int,
                   where: str | None = None) -> None:
    """One ``…SetAttribute`` call, the value in the attribute's own type."""
    buf = np.array(value, dtype=dtype_of(attr))
    lt_call(name, setter, obj, attr, buf.ctypes.data, buf.itemsize, where=where)


class CublasLt:
    """The cuBLASLt state of one runtime: handle, descriptor, workspace, caches."""

    def __init__(self, stream: Stream, workspace_bytes: int = WORKSPACE_BYTES) -> None:
        self.library = _load_library()
        try:
            self.version = int(lt.get_version())
        except RuntimeError as e:  # nvmath's NotSupportedError, pathfinder's DynamicLibNotFoundError
            raise CudaError("cublasLtGetVersion", "CUBLASLT_NOT_LOADED", str(e),
                            help="install cuBLASLt 13 (the nvidia-cublas wheel or the CUDA toolkit)")
        self.stream = stream
        self._handle = lt_call("cublasLtCreate", lt.create)
        self._desc = lt_call("cublasLtMatmulDescCreate", lt.matmul_desc_create, COMPUTE_32F, R_32F)
        for attr, val in ((DESC_TRANSA, OP_T), (DESC_TRANSB, OP_N)):
            _set_attribute("cublasLtMatmulDescSetAttribute", lt.matmul_desc_set_attribute,
                           lt.get_matmul_desc_attribute_dtype, self._desc, attr, val)
        self.workspace_bytes = workspace_bytes
        self.workspace = device_alloc(workspace_bytes, where="cuBLASLt workspace")
        self._alpha = np.ones(1, np.float32)
        self._betas = {0.0: np.zeros(1, np.float32), 1.0: np.ones(1, np.float32)}
        self._layouts: dict[tuple[int, int, int], int] = {}
        #: problem.shape_key -> (heuristic result, microseconds, candidates timed); a result
        #: is a one-element array of HEURISTIC, whose algo the prepared calls point at
        self.algos: dict[tuple, tuple[np.ndarray, float, int]] = {}

    # -- helpers ---------------------------------------------------------------------------
    def _layout(self, rows: int, cols: int, ld: int) -> int:
        key = (rows, cols, ld)
        lay = self._layouts.get(key)
        if lay is None:
            lay = lt_call("cublasLtMatrixLayoutCreate", lt.matrix_layout_create, R_16BF, rows, cols, ld)
            self._layouts[key] = lay
        return lay

    def _args(self, p: LtProblem, heur: np.ndarray, c_out: int | None = None) -> tuple:
        la, lb, lc = self._layout(*p.a_layout), self._layout(*p.b_layout), self._layout(*p.c_layout)
        c = p.c if c_out is None else c_out
        return (self._handle, self._desc, self._alpha.ctypes.data, p.a, la, p.b, lb,
                self._betas[p.beta].ctypes.data, c, lc, c, lc,
                heur.ctypes.data + _ALGO_OFFSET, self.workspace, self.workspace_bytes, self.stream.id)

    def _candidates(self, p: LtProblem, where: str) -> list[np.ndarray]:
        pref = lt_call("cublasLtMatmulPreferenceCreate", lt.matmul_preference_create, where=where)
        try:
            for attr, val in ((PREF_MAX_WORKSPACE, self.workspace_bytes),
                              *zip(PREF_MIN_ALIGN, map(pointer_alignment, (p.a, p.b, p.c, p.c)))):
                _set_attribute("cublasLtMatmulPreferenceSetAttribute", lt.matmul_preference_set_attribute,
                               lt.get_matmul_preference_attribute_dtype, pref, attr, val, where)
            results = np.zeros(CANDIDATES, HEURISTIC)
            count = np.zeros(1, np.int32)
            la, lb, lc = self._layout(*p.a_layout), self._layout(*p.b_layout), self._layout(*p.c_layout)
            lt_call("cublasLtMatmulAlgoGetHeuristic", lt.matmul_algo_get_heuristic,
                    self._handle, self._desc, la, lb, lc, lc, pref, CANDIDATES,
                    results.ctypes.data, count.ctypes.data, where=where)
        finally:
            _quiet(lt.matmul_preference_destroy, pref)
        out = [results[i:i + 1].copy() for i in range(int(count[0]))
               if results["state"][i] == 0 and results["workspace_size"][i] <= self.workspace_bytes]
        if not out:
            raise CudaError("cublasLtMatmulAlgoGetHeuristic", "NO_ALGORITHM",
                            f"no algorithm for layouts A{p.a_layout} B{p.b_layout} C{p.c_layout}",
                            where=where)
        return out

    # -- public ----------------------------------------------------------------------------
    def choose(self, p: LtProblem, where: str) -> np.ndarray:
        """The algorithm for ``p``: cached, else timed among the heuristic's candidates.
        Launches work on the stream; never call while the stream is capturing."""
        hit = self.algos.get(p.shape_key)
        if hit is not None:
            return hit[0]
        made = _PROCESS_CHOICES.get((self.version, p.shape_key))
        if made is not None:
            self.algos[p.shape_key] = (made[0].copy(), made[1], made[2])
            return self.algos[p.shape_key][0]
        h = self._choose(p, where)
        a = self.algos[p.shape_key]
        _PROCESS_CHOICES[(self.version, p.shape_key)] = (h.copy(), a[1], a[2])
        return h

    def _choose(self, p: LtProblem, where: str) -> np.ndarray:
        cands = self._candidates(p, where)
        if len(cands) == 1:
            self.algos[p.shape_key] = (cands[0], float("nan"), 1)
            return cands[0]
        rows, cols, _ = p.c_layout
        tmp = device_alloc(rows * cols * 2, where=f"{where}: cuBLASLt timing output")
        flush = device_alloc(L2_FLUSH_BYTES, where=f"{where}: cuBLASLt timing L2 flush")
        events = [Event() for _ in range(2 * TIMING_REPS)]
        best: tuple[float, np.ndarray] | None = None
        try:
            for h in cands:
                args = self._args(p, h, c_out=tmp)
                try:
                    for _ in range(TIMING_WARMUP):
                        lt.matmul(*args)
                except lt.cuBLASLtError:
                    continue  # this candidate cannot run the problem after all
                for r in range(TIMING_REPS):
                    call("cuMemsetD8Async", flush, r & 0xFF, L2_FLUSH_BYTES, self.stream.handle,
                         where=where)
                    events[2 * r].record(self.stream)
                    lt_call("cublasLtMatmul", lt.matmul, *args, where=where)
                    events[2 * r + 1].record(self.stream)
                events[-1].synchronize()
                times = sorted(events[2 * r + 1].elapsed_ms(events[2 * r]) for r in range(TIMING_REPS))
                us = times[TIMING_REPS // 2] * 1000
                if best is None or us < best[0]:
                    best = (us, h)
            self.stream.synchronize(where=f"{where}: cuBLASLt timing")
        finally:
            for e in events:
                e.destroy()
            device_free(flush)
            device_free(tmp)
        if best is None:
            raise CudaError("cublasLtMatmul", "NO_ALGORITHM",
                            f"none of the {len(cands)} candidates ran", where=where)
        self.algos[p.shape_key] = (best[1], best[0], len(cands))
        return best[1]

    def prepare(self, p: LtProblem, where: str) -> "ExternLaunch":
        return ExternLaunch(self, p, self.choose(p, where), where)

    def describe(self) -> str:
        v = self.version
        return (f"cuBLASLt {v // 10000}.{v % 10000 // 100}.{v % 100} (nvmath-python "
                f"{nvmath.__version__} bindings), workspace {self.workspace_bytes >> 20} MiB")

    def close(self) -> None:
        for lay in self._layouts.values():
            _quiet(lt.matrix_layout_destroy, lay)
        self._layouts.clear()
        if self._desc:
            _quiet(lt.matmul_desc_destroy, self._desc)
            self._desc = 0
        if self._handle:
            _quiet(lt.destroy, self._handle)
            self._handle = 0
        if self.workspace:
            device_free(self.workspace)
            self.workspace = 0


class ExternLaunch:
    """One prepared cublasLtMatmul call; :meth:`run` is one library call."""

    __slots__ = ("_fn", "_args", "_heur", "_state", "where")

    def __init__(self, lt_state: CublasLt, p: LtProblem, heur: np.ndarray, where: str) -> None:
        self._state = lt_state  # kept alive, and heur: _args holds the addresses of their
        self._heur = heur       # α, β and algo
        self._fn = lt.matmul
        self._args = lt_state._args(p, heur)
        self.where = where

    def run(self) -> None:
        try:
            self._fn(*self._args)
        except lt.cuBLASLtError as e:
            raise CudaError("cublasLtMatmul", status_name(e.status), where=self.where) from None
