"""The runtime: load a verified manifest onto one GPU and replay its programs.

Typical use::

    rt = Runtime.load("manifest.json", "kernels/", weights=["model.safetensors"], capacity=4096)
    print(rt.summary())
    rt.write("token_ids", np.array([1, 2, 3], np.int64))     # whole buffer or a prefix
    rt.run("prefill", {"tokens": 3})                          # graph=True by default
    rt.run("decode", {"tokens": 1})             # after writing the last token's inputs
    token = rt.read("next_token")    # at the last run's symbols; refused if no run wrote it

Contracts:
- All work is queued on one non-blocking stream owned by the runtime; ``run`` returns
  without waiting, ``read`` waits for everything queued before it.
- ``write`` goes through a pinned staging buffer per input and a host-to-device copy
  *outside* any graph, ordered before the next ``run`` on the same stream; ``copy`` feeds one
  buffer into an input on the device, ordered the same way; ``write_scalars`` sets single
  i32/i64 values as one queued store operation (no staging, no copy).
- ``read_async`` queues a read and returns at once; its ``wait()`` waits for that read only
  (:mod:`.readback`), so later runs can stay queued while the caller waits.
- A graph is captured once per (program, symbol values), after the cuBLASLt algorithms for
  that key were chosen, and replayed with one ``cuGraphLaunch``. ``graph=False`` launches the
  same prepared steps one by one; both compute identical bits.
- Every refused call (unknown name, symbol out of range, wrong dtype) raises before any
  work is queued; the runtime stays usable.
- The device is reached only through a :class:`~kern_runtime.device.Device` (``backend``:
  CUDA by default); everything else here is the backend-independent logic.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from kern_manifest import Manifest, VerifiedManifest, shape_at

from . import errors
from .artifacts import Resolution, resolve_steps
from .device import Backend, Device, check_backend, open_device
from .errors import CallerError
from .gemm import row_major_tn
from .hostdata import HOST_DTYPES, host_view
from .launchplan import (BoundExtern, StepTemplate, bind_all, check_symbols, compile_program,
                         graph_key, shared_mem_max)
from .mailbox import Mailbox
from .prepare import Prepared, prepare
from .readback import PendingRead
from .scalars import ScalarWrites
from .sequence import SequenceRuns
from .summary import GraphInfo, WeightsInfo, render_summary
from .upload import CHUNK_BYTES, default_progress, upload
from .weights import upload_chunks
from .written import Written

#: Prepared (bound) launch lists kept for eager runs, least recently used evicted.
EAGER_CACHE = 32
#: Reads up to this size go through a pinned buffer; larger ones straight to pageable memory.
PINNED_READ_MAX = 64 * 2**20
#: Largest buffer :meth:`Runtime.read_async` takes (its slots are pinned for the runtime's life).
ASYNC_READ_MAX = 1 * 2**20


def _a(word: str) -> str:
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


class Runtime(SequenceRuns, ScalarWrites):
    """One manifest loaded onto one device. Create with :meth:`load`; release with
    :meth:`close` (or use as a context manager)."""

    # -- load ------------------------------------------------------------------------------
    @classmethod
    def load(cls, manifest: "str | os.PathLike | VerifiedManifest | Manifest",
             kernels_dir: str | os.PathLike | None = None,
             weights: Sequence[str | os.PathLike] = (), capacity: int | None = None,
             device: int = 0, progress: Callable[[int, int], None] | None = default_progress,
             backend: Backend = "cuda", pdl: bool = True) -> "Runtime":
        """Verify, check artifacts, allocate, resolve, upload. Raises a
        :class:`~kern_runtime.errors.KernRuntimeError` subclass naming the place; on any
        failure everything already allocated is released. ``device`` is the device index
        (the GPU ordinal); ``backend`` is ``"cuda"`` or a callable ``ordinal -> Device``
        (:mod:`kern_runtime.device`); ``pdl=False`` launches ``pdl`` steps plainly (A/B)."""
        check_backend(backend)
        prep = prepare(manifest, kernels_dir, weights, capacity)
        rt = cls.__new__(cls)
        rt._init(prep, device, backend, pdl)
        try:
            rt._load_device(progress)
        except BaseException:
            rt.close()
            raise
        return rt

    def _init(self, prep: Prepared, device: int, backend: Backend, pdl: bool = True) -> None:
        self.prepared = prep
        self.vm = prep.vm
        self.plan = prep.plan
        self._device, self._backend, self.pdl = device, backend, pdl
        self._dev: Device | None = None   # opened at load, released last by close
        self._stream = None
        self._arena = None
        self._modules = None
        self._lt = None
        self._closed = False
        self.resolutions: dict[tuple[str, int], Resolution] = {}
        self._templates: dict[str, list[StepTemplate]] = {}
        self._funcs: dict[tuple[str, int], Any] = {}
        self._eager: OrderedDict[tuple, list] = OrderedDict()
        self._graphs: dict[tuple, Any] = {}
        self._graph_info: list[GraphInfo] = []
        self._staging: dict[str, tuple[Any, Any]] = {}   # name -> (PinnedBuffer, Event)
        self.stream_writes = True     # write_scalars as one store operation (False: write)
        self._mailboxes: list[Mailbox] = []
        self._read_staging: dict[str, Any] = {}
        self._read_rings: dict[str, Any] = {}            # name -> readback.ReadRing
        self._last_values: dict[str, int] | None = None
        self._written = Written(prep.vm)  # outputs some run wrote (host reads check it)
        self.weights_info = WeightsInfo(files=list(prep.weight_files),
                                        unused_tensors=prep.unused_tensors)

    def _load_device(self, progress) -> None:
        dev = self._dev = open_device(self._backend, self._device)
        self._stream = dev.stream()
        self._arena = dev.arena(self.plan.total, self.plan.align, where="arena")
        self._arena.zero(self._stream.id)
        self.addresses = self.plan.addresses(self._arena.base)
        self._modules = dev.modules(self.prepared.cubins)
        self.resolutions = resolve_steps(self.vm, self.prepared.cubins, self.prepared.search,
                                         self._modules.lookup)
        for (kname, j), r in self.resolutions.items():
            if r.module is None:
                continue
            func = self._modules.function(r.module, r.symbol)
            self._funcs[(kname, j)] = func
            smem = shared_mem_max(self.vm, kname, j)
            if smem > 0:    # the backend raises the limit where static + dynamic > 48 KiB
                self._modules.allow_dynamic_shared(func, smem, errors.kernel_step(kname, j, r.symbol),
                                                   dev.max_shared_optin)
        if any(s.is_extern for k in self.vm.manifest.kernels.values() for s in k.impl.steps):
            self._lt = dev.gemm(self._stream)
        for name in self.vm.manifest.programs:
            self._templates[name] = compile_program(self.vm, name, self.plan, self.addresses,
                                                    self.pdl)
        self._upload_weights(progress)
        self._stream.synchronize(where="load")

    def _upload_weights(self, progress) -> None:
        bindings = self.prepared.weights
        total = sum(b.entry.nbytes for b in bindings)
        self.weights_info.count = len(bindings)
        self.weights_info.nbytes = total
        if not bindings:
            return
        secs = upload(self._dev, upload_chunks(bindings, CHUNK_BYTES), self.addresses.buffers,
                      self._stream, total, CHUNK_BYTES, progress)
        self.weights_info.seconds = secs

    # -- run -------------------------------------------------------------------------------
    def _program(self, program: str) -> list[StepTemplate]:
        self._check_open()
        t = self._templates.get(program)
        if t is None:
            raise CallerError(f"unknown program `{program}`",
                              help=f"programs: {', '.join(self.vm.manifest.programs)}")
        return t

    def _steps(self, program: str, values: dict[str, int]) -> list:
        """Prepared launches for (program, values): bound, cuBLASLt algorithms chosen."""
        key = graph_key(program, values)
        steps = self._eager.get(key)
        if steps is not None:
            self._eager.move_to_end(key)
            return steps
        out = []
        for b in bind_all(self._templates[program], values):
            if isinstance(b, BoundExtern):
                p = row_major_tn(b.m, b.n, b.k, b.a, b.w, b.c, b.accumulate)
                out.append(self._lt.prepare(p, b.template.where))  # type: ignore[union-attr]
            else:
                t = b.template
                out.append(self._dev.kernel(self._funcs[(t.kernel, t.step)], b, self._stream))
        self._eager[key] = out
        while len(self._eager) > EAGER_CACHE:
            self._eager.popitem(last=False)
        return out

    def run(self, program: str, symbols: Mapping[str, int] | None = None, *,
            graph: bool = True) -> None:
        """Queue one run of ``program`` with ``symbols`` (every manifest symbol, each in
        ``[min, max]``). ``graph=True`` replays (capturing on first use) a CUDA graph;
        ``graph=False`` launches step by step. Does not wait for the GPU."""
        self._program(program)
        values = check_symbols(self.vm, symbols or {}, program)
        key = graph_key(program, values)
        if graph:
            g = self._graphs.get(key)
            if g is None:
                g = self.capture(program, values)
            g.launch(self._stream, where=f"program `{program}`")
        else:
            for s in self._steps(program, values):
                s.run()
        self._last_values = values
        self._written.ran(program)

    def capture(self, program: str, symbols: Mapping[str, int]) -> Any:
        """Capture (once) and return the graph of (program, symbols) without running it."""
        self._program(program)
        values = check_symbols(self.vm, symbols, program)
        key = graph_key(program, values)
        g = self._graphs.get(key)
        if g is not None:
            return g
        steps = self._steps(program, values)  # algorithm choice happens here, before capture
        where = f"program `{program}` {dict(values)}"
        g = self._dev.capture(self._stream, steps, where)
        self._graphs[key] = g
        self._graph_info.append(GraphInfo(program, dict(values), g.nodes, g.capture_s * 1000))
        return g

    # -- data ------------------------------------------------------------------------------
    def _buffer(self, name: str):
        self._check_open()
        b = self.vm.manifest.buffers.get(name)
        if b is None:
            raise CallerError(f"unknown buffer `{name}`")
        return b

    def _writable(self, name: str, subject: str):
        """Buffer ``name`` if the caller may write it (input or carry); ``subject`` starts
        the refusal."""
        b = self._buffer(name)
        if b.cls not in ("input", "carry"):
            raise CallerError(f"{subject} is {_a(b.cls)} buffer; only input and carry "
                              f"buffers are written by the caller")
        return b

    def _extent(self, name: str, symbols: Mapping[str, int] | None, where: str
                ) -> tuple[tuple[int, ...], np.dtype, int]:
        """(host shape, host dtype, bytes) of buffer ``name`` at ``symbols`` (default:
        the last run's symbol values, else the maxima)."""
        b = self._buffer(name)
        values = (check_symbols(self.vm, symbols, where) if symbols is not None
                  else self._last_values or dict(self.vm.sym_max))
        shape = tuple(shape_at(b.shape, values))
        dtype = HOST_DTYPES[b.dtype]
        return shape, dtype, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize

    def write(self, name: str, array: np.ndarray) -> None:
        """Copy ``array`` (the whole buffer or a prefix, dtype per :data:`HOST_DTYPES`) into
        input or carry buffer ``name``, ordered before the next run."""
        b = self._writable(name, f"buffer `{name}`")
        view = host_view(name, b, array, self.vm.sym_max, self.plan.capacity)
        st = self._staging.get(name)
        if st is None:
            st = (self._dev.pinned(self.plan.buffers[name].nbytes), self._dev.event(timing=False))
            self._staging[name] = st
            pending = False
        else:
            pending = True
        pinned, ev = st
        if pending:
            ev.synchronize()  # the previous copy out of this staging buffer has finished
        n = view.nbytes
        if n:
            pinned.array[:n] = view
            self._dev.h2d(self.addresses.buffers[name], pinned.addr, n, self._stream,
                          where=f"write `{name}`")
        ev.record(self._stream)

    def read(self, name: str, symbols: Mapping[str, int] | None = None) -> np.ndarray:
        """Wait for queued work and return buffer ``name`` at the shape of ``symbols`` (default:
        the last run's symbol values, else the maxima) as a new host array."""
        where = f"read `{name}`"
        shape, dtype, n = self._extent(name, symbols, where)
        self._written.check((name,), where)
        out = np.empty(shape, dtype=dtype)
        src = self.addresses.buffers[name]
        if n <= PINNED_READ_MAX:
            pinned = self._read_staging.get(name)
            if pinned is None or pinned.nbytes < n:
                if pinned is not None:
                    pinned.free()
                pinned = self._dev.pinned(min(self.plan.buffers[name].nbytes, PINNED_READ_MAX))
                self._read_staging[name] = pinned
            if n:
                self._dev.d2h(pinned.addr, src, n, self._stream, where=where)
            self._stream.synchronize(where=where)
            out.reshape(-1).view(np.uint8)[:] = pinned.array[:n]
        else:
            self._stream.synchronize(where=where)
            self._dev.d2h(out.ctypes.data, src, n, self._stream, where=where)
            self._stream.synchronize(where=where)
        return out

    def read_async(self, name: str, symbols: Mapping[str, int] | None = None) -> "PendingRead":
        """Queue a read of buffer ``name`` (shape as for :meth:`read`) behind the work queued
        so far and return at once; ``.wait()`` returns the array. Buffers of at most
        :data:`ASYNC_READ_MAX` bytes."""
        where = f"read `{name}`"
        shape, dtype, n = self._extent(name, symbols, where)
        self._written.check((name,), where)
        cap = self.plan.buffers[name].nbytes
        if cap > ASYNC_READ_MAX:
            raise CallerError(f"read_async `{name}`: {cap} bytes is more than "
                              f"{ASYNC_READ_MAX} (use read)")
        ring = self._read_rings.get(name)
        if ring is None:
            from .readback import ReadRing
            ring = self._read_rings[name] = ReadRing(self._dev, cap)
        return ring.queue(self.addresses.buffers[name], shape, dtype, n, self._stream, where)

    def synchronize(self) -> None:
        """Wait for all queued work (surfaces asynchronous kernel faults here)."""
        self._check_open()
        self._stream.synchronize(where="synchronize")  # type: ignore[union-attr]

    # -- introspection ---------------------------------------------------------------------
    def summary(self) -> str:
        extras = []
        if self._lt is not None:
            extras.append(self._lt.describe())
            for key, (_, us, n) in self._lt.algos.items():
                (_, _, a, b, c, acc, *_al) = key
                extras.append(f"  GEMM n={c[0]} m={c[1]} k={a[0]}{' acc' if acc else ''}: "
                              f"best of {n} algorithms, {us:.1f} µs")
        return render_summary(self.vm, self.plan, self.resolutions, self.weights_info,
                              self._graph_info, self._dev.describe() if self._dev else "",
                              extras)

    @property
    def graphs(self) -> list[GraphInfo]:
        return list(self._graph_info)

    def address(self, name: str) -> int:
        """Device address of buffer or state ``name`` (for interop, e.g. with torch)."""
        self._check_open()
        if name in self.addresses.buffers:
            return self.addresses.buffers[name]
        if name in self.addresses.states:
            return self.addresses.states[name]
        raise CallerError(f"unknown buffer or state `{name}`")

    @property
    def stream_handle(self) -> int:
        return self._stream.id  # type: ignore[union-attr]

    # -- teardown --------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise CallerError("this runtime was closed")

    def close(self) -> None:
        """Release graphs, staging, modules, memory and the context reference. Idempotent."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        first: BaseException | None = None

        def attempt(fn):
            nonlocal first
            try:
                fn()
            except BaseException as e:  # keep releasing; report the first failure
                if first is None:
                    first = e

        if self._stream is not None:
            attempt(self._stream.synchronize)
        for g in self._graphs.values():
            attempt(g.destroy)
        self._graphs.clear()
        self._eager.clear()
        for pinned, ev in self._staging.values():
            attempt(pinned.free)
            attempt(ev.destroy)
        self._staging.clear()
        for pinned in self._read_staging.values():
            attempt(pinned.free)
        self._read_staging.clear()
        for box in self._mailboxes:
            attempt(box.free)
        self._mailboxes.clear()
        for ring in self._read_rings.values():
            attempt(ring.free)
        self._read_rings.clear()
        if self._lt is not None:
            attempt(self._lt.close)
        if self._modules is not None:
            attempt(self._modules.unload)
        if self._arena is not None:
            attempt(self._arena.free)
        if self._stream is not None:
            attempt(self._stream.destroy)
        if self._dev is not None:
            attempt(self._dev.release)
        if first is not None:
            raise first

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # best effort; explicit close() is the contract
        try:
            self.close()
        except Exception:
            pass

