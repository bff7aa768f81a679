"""The null device: :class:`kern_runtime.device.Device` on host memory, for CPU tests.

``Runtime.load(..., backend=NullDevice)`` (or :func:`load_null`) runs the whole runtime —
resolution, arena layout, weight upload, binding, the graph and eager caches, writes, reads,
copies, teardown — with no GPU:

- the arena is a zeroed numpy byte array at a fake, 64 KiB-aligned device address; copies
  run at once (so stream order holds trivially) and are bounds-checked against it;
- a "cubin" is a JSON object ``{"functions": {symbol: [param byte sizes]}}`` (write one with
  :func:`null_cubin`); modules resolve symbols from it, anything else does not load;
- launches and GEMMs do nothing; graphs record the steps run during capture;
- every call is appended to :attr:`NullDevice.calls` as a tuple ``(op, ...)``, and the
  CUDA rules the runtime must keep are checked: no copy, event, wait or algorithm choice
  while a stream captures, nothing used after it was freed.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from kern_manifest import abi_layout

from kern_runtime import CudaError, KernelArtifactError

#: Fake device address of the first allocation (64 KiB aligned, far from host pointers).
BASE = 0x7E00_0000_0000
#: The H100/H200 opt-in shared memory per block (bytes).
MAX_SHARED_OPTIN = 232448


def null_cubin(path: Path, functions: Mapping[str, Sequence[str]]) -> Path:
    """Write a null-device cubin holding ``functions`` (symbol -> declared param types)."""
    sizes = {sym: [s for _, s in abi_layout(list(params))] for sym, params in functions.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"functions": sizes}))
    return path


class NullDevice:
    """One null device; ``count`` devices exist (an ordinal beyond them is refused)."""

    def __init__(self, ordinal: int = 0, count: int = 1) -> None:
        if not 0 <= ordinal < count:
            raise CudaError("cuDeviceGet", "CUDA_ERROR_INVALID_DEVICE",
                            f"device {ordinal} requested, {count} present")
        self.ordinal = ordinal
        self.max_shared_optin = MAX_SHARED_OPTIN
        self.calls: list[tuple] = [("open", ordinal)]
        self.pdl: dict[str, bool] = {}        # launch place -> launched with PDL
        self.capturing = False
        self._recorded: list[tuple] = []      # what the steps run during a capture queued
        self.memory = np.zeros(0, np.uint8)   # the arena's bytes
        self.base = BASE
        self._pinned: dict[int, NullPinned] = {}   # live pinned buffers by address
        self._next_stream = 1
        self.released = False

    # -- helpers for tests ---------------------------------------------------------------
    def ops(self, *names: str) -> list[tuple]:
        """The calls whose op is one of ``names``, in order."""
        return [c for c in self.calls if c[0] in names]

    def view(self, addr: int, nbytes: int) -> np.ndarray:
        """The arena's bytes ``[addr, addr + nbytes)`` (a writable view)."""
        off = addr - self.base
        if not (0 <= off and off + nbytes <= self.memory.size):
            raise AssertionError(f"device range {addr:#x}+{nbytes} is outside the arena "
                                 f"{self.base:#x}+{self.memory.size}")
        return self.memory[off:off + nbytes]

    def _log(self, *call: Any) -> None:
        self.calls.append(call)

    def _not_capturing(self, what: str) -> None:
        if self.capturing:
            raise AssertionError(f"{what} while the stream captures")

    def _host(self, addr: int, nbytes: int) -> np.ndarray | None:
        for p in self._pinned.values():
            if p.addr <= addr and addr + nbytes <= p.addr + p.nbytes:
                return p.array[addr - p.addr:addr - p.addr + nbytes]
        return None

    # -- Device -------------------------------------------------------------------------
    def describe(self) -> str:
        return f"device {self.ordinal}: null device (host memory)"

    def stream(self) -> "NullStream":
        s = NullStream(self, self._next_stream)
        self._next_stream += 1
        self._log("stream", s.id)
        return s

    def arena(self, nbytes: int, align: int, where: str) -> "NullArena":
        assert BASE % align == 0, "the fake base must satisfy the plan's alignment"
        self.memory = np.zeros(nbytes, np.uint8)
        self._log("arena", nbytes, align, where)
        return NullArena(self, nbytes)

    def modules(self, cubins) -> "NullModules":
        self._log("modules", tuple(cubins))
        return NullModules(self, cubins)

    def kernel(self, func: Any, bound: Any, stream: "NullStream") -> "NullStep":
        where = bound.template.where
        self._log("bind", where, bound.grid, bound.shared_mem)
        self.pdl[where] = bound.template.pdl      # launched with programmatic dependent launch
        return NullStep(self, ("launch", where, bound.grid, bound.block, bound.shared_mem,
                               bound.args.data))

    def gemm(self, stream: "NullStream") -> "NullGemm":
        self._log("gemm")
        return NullGemm(self)

    def capture(self, stream: "NullStream", steps: Sequence[Any], where: str) -> "NullGraph":
        self._not_capturing("capture")
        self.capturing, self._recorded = True, []
        try:
            for s in steps:
                s.run()
        finally:
            self.capturing = False
        self._log("capture", where, len(self._recorded))
        return NullGraph(self, self._recorded)

    def pinned(self, nbytes: int) -> "NullPinned":
        p = NullPinned(self, nbytes)
        self._pinned[p.addr] = p
        self._log("pinned", p.nbytes)
        return p

    def mapped(self, nbytes: int) -> "NullPinned":
        p = NullPinned(self, nbytes)
        self._pinned[p.addr] = p
        self._log("mapped", p.nbytes)
        return p

    def memory_at(self, addr: int, nbytes: int) -> np.ndarray:
        """The bytes at ``addr``: pinned (mapped) host memory, else the arena's."""
        host = self._host(addr, nbytes)
        return host if host is not None else self.view(addr, nbytes)

    def event(self, timing: bool = True) -> "NullEvent":
        self._log("event", timing)
        return NullEvent(self)

    def h2d(self, dst: int, src_host: int, nbytes: int, stream: "NullStream",
            where: str | None = None) -> None:
        self._not_capturing(f"h2d ({where})")
        src = self._host(src_host, nbytes)
        if src is None:
            raise AssertionError(f"h2d ({where}) from host memory that is not pinned")
        self.view(dst, nbytes)[:] = src
        self._log("h2d", dst, nbytes, where)

    def d2h(self, dst_host: int, src: int, nbytes: int, stream: "NullStream",
            where: str | None = None) -> None:
        self._not_capturing(f"d2h ({where})")
        data = self.view(src, nbytes)
        dst = self._host(dst_host, nbytes)
        if dst is not None:
            dst[:] = data
        else:  # pageable memory the caller owns (the runtime's large reads)
            ctypes.memmove(dst_host, data.ctypes.data, nbytes)
        self._log("d2h", src, nbytes, where)

    def d2d(self, dst: int, src: int, nbytes: int, stream: "NullStream",
            where: str | None = None) -> None:
        if self.capturing:      # a memcpy node (the null graph's replay moves no data)
            self._recorded.append(("d2d", dst, src, nbytes, where))
            return
        self.view(dst, nbytes)[:] = self.view(src, nbytes).copy()
        self._log("d2d", dst, src, nbytes, where)

    def write_words(self, words, stream: "NullStream", where: str | None = None) -> None:
        self._not_capturing(f"write_words ({where})")
        assert 0 < len(words) <= 255, f"{len(words)} words in one batch"
        for addr, value in words:
            assert addr % 4 == 0 and 0 <= value < 2**32, (addr, value)
            self.view(addr, 4)[:] = np.array([value], "<u4").view(np.uint8)
        self._log("write_words", tuple(words), where)

    def copies(self, segments, stream: "NullStream", where: str) -> "NullCopies":
        self._log("bind copies", tuple(segments), where)
        return NullCopies(self, tuple(segments), where)

    def release(self) -> None:
        assert not self.released, "released twice"
        self.released = True
        self._log("release")


class NullStream:
    def __init__(self, dev: NullDevice, id_: int) -> None:
        self.dev, self.id = dev, id_

    def synchronize(self, where: str | None = None) -> None:
        self.dev._not_capturing("stream synchronize")
        self.dev._log("sync", where)

    def destroy(self) -> None:
        self.dev._log("destroy stream", self.id)


class NullEvent:
    def __init__(self, dev: NullDevice) -> None:
        self.dev, self.alive = dev, True

    def record(self, stream: NullStream) -> None:
        assert self.alive, "event used after destroy"
        self.dev._not_capturing("event record")
        self.dev._log("record", stream.id)
        self.at = len(self.dev.calls)

    def synchronize(self) -> None:
        assert self.alive, "event used after destroy"
        self.dev._log("wait event")

    def elapsed_ms(self, since: "NullEvent") -> float:
        """Null time: the device calls logged between the two records."""
        assert self.alive and since.alive, "event used after destroy"
        return float(self.at - since.at)

    def destroy(self) -> None:
        self.alive = False
        self.dev._log("destroy event")


class NullPinned:
    def __init__(self, dev: NullDevice, nbytes: int) -> None:
        self.dev = dev
        self.nbytes = max(int(nbytes), 1)
        self.array = np.zeros(self.nbytes, np.uint8)
        self.addr = self.array.ctypes.data

    def free(self) -> None:
        if self.dev._pinned.pop(self.addr, None) is not None:
            self.dev._log("free pinned", self.nbytes)


class NullArena:
    def __init__(self, dev: NullDevice, nbytes: int) -> None:
        self.dev, self.base, self.nbytes = dev, dev.base, nbytes

    def zero(self, stream: int) -> None:
        self.dev.memory[:] = 0
        self.dev._log("zero", self.base, self.nbytes)

    def free(self) -> None:
        self.dev._log("free arena")


class NullModules:
    def __init__(self, dev: NullDevice, cubins) -> None:
        self.dev = dev
        self._funcs: dict[str, dict[str, list[int]]] = {}
        problems = []
        for name, f in cubins.items():
            try:
                self._funcs[name] = {k: list(v) for k, v in json.loads(f.data)["functions"].items()}
            except (ValueError, KeyError, TypeError, AttributeError):
                problems.append(f"cubin `{name}`: the null device cannot load it (not a null "
                                f"cubin, see krt_null.null_cubin)")
        if problems:
            raise KernelArtifactError("cubins could not be loaded", problems=problems)

    def lookup(self, module: str, symbol: str) -> list[int] | None:
        return self._funcs.get(module, {}).get(symbol)

    def function(self, module: str, symbol: str) -> tuple[str, str]:
        if self.lookup(module, symbol) is None:
            raise KeyError((module, symbol))
        return (module, symbol)

    def allow_dynamic_shared(self, func: Any, nbytes: int, where: str,
                             device_limit: int) -> None:
        if nbytes > device_limit:
            raise KernelArtifactError(f"needs {nbytes} B of dynamic shared memory; the device "
                                      f"allows {device_limit} B per block", where=where)
        self.dev._log("smem", func, nbytes)

    def unload(self) -> None:
        self.dev._log("unload")


class NullStep:
    """A prepared launch: logs ``call`` when run eagerly, is recorded while capturing."""

    def __init__(self, dev: NullDevice, call: tuple) -> None:
        self.dev, self.call = dev, call

    def run(self) -> None:
        if self.dev.capturing:
            self.dev._recorded.append(self.call)
        else:
            self.dev._log(*self.call)


class NullCopies:
    """A copy-kernel launch: recorded while capturing, else the copies made and logged."""

    def __init__(self, dev: NullDevice, segments: tuple, where: str) -> None:
        self.dev, self.segments, self.where = dev, segments, where

    def run(self) -> None:
        if self.dev.capturing:
            self.dev._recorded.append(("copies", self.segments, self.where))
            return
        for dst, src, n in self.segments:
            self.dev.memory_at(dst, n)[:] = self.dev.memory_at(src, n).copy()
        self.dev._log("copies", self.segments, self.where)


class NullGemm:
    def __init__(self, dev: NullDevice) -> None:
        self.dev = dev
        self.algos: dict[tuple, tuple[Any, float, int]] = {}

    def prepare(self, problem: Any, where: str) -> NullStep:
        self.dev._not_capturing("GEMM algorithm choice")
        if problem.shape_key not in self.algos:
            self.algos[problem.shape_key] = (None, 1.0, 1)
            self.dev._log("choose", where)
        return NullStep(self.dev, ("matmul", where, problem))

    def describe(self) -> str:
        return "null GEMM (no-op)"

    def close(self) -> None:
        self.dev._log("close gemm")


class NullGraph:
    def __init__(self, dev: NullDevice, steps: list[tuple]) -> None:
        self.dev, self.steps = dev, steps
        self.nodes, self.capture_s, self.alive = len(steps), 0.0, True

    def launch(self, stream: NullStream, where: str | None = None) -> None:
        assert self.alive, "graph launched after destroy"
        self.dev._log("graph", where, self.nodes)

    def destroy(self) -> None:
        self.alive = False
        self.dev._log("destroy graph")


class NullBackend:
    """A ``backend`` for ``Runtime.load`` that keeps the :class:`NullDevice` s it opened (so
    that a test can look at the device of a load that failed)."""

    def __init__(self, count: int = 1) -> None:
        self.count = count
        self.devices: list[NullDevice] = []

    def __call__(self, ordinal: int) -> NullDevice:
        self.devices.append(NullDevice(ordinal, self.count))
        return self.devices[-1]


def load_null(manifest, kernels_dir=None, weights=(), capacity=None, **kw):
    """``Runtime.load`` on a fresh :class:`NullDevice`; returns (runtime, device)."""
    from kern_runtime import Runtime
    backend = NullBackend()
    rt = Runtime.load(manifest, kernels_dir, weights=weights, capacity=capacity,
                      progress=None, backend=backend, **kw)
    return rt, backend.devices[0]
