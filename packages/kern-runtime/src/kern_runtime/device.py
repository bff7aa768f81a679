"""The device seam: what :class:`~kern_runtime.Runtime` needs from a device, as one
:class:`Device` protocol, and :func:`open_device`, the one factory.

The CUDA backend (:class:`kern_runtime.cuda.device.CudaDevice`) is the only implementation in
src and the only code that touches the driver. Anything else with the same methods can stand
in: the tests' null device (host memory, no-op launches, a log of every call) is passed as
``Runtime.load(..., backend=NullDevice)`` and runs the runtime's own logic in CI.

Contracts every backend keeps:
- Units are bytes; device addresses and host pointers are plain ints.
- Work is queued on a :class:`Stream` and runs in queue order on it; ``Stream.synchronize``
  and ``Event.synchronize`` wait for it. Copies take host pointers into :meth:`Device.pinned`
  memory (``d2h`` also into any host memory the caller owns).
- :meth:`Device.capture` records what the steps queue, without running it, into a graph that
  :meth:`Graph.launch` replays; nothing else is queued on the stream while it captures.
- A method given ``where`` names that place in the :class:`~kern_runtime.KernRuntimeError`
  it raises.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Union

from .errors import CallerError

if TYPE_CHECKING:
    import numpy as np

    from .artifacts import CubinFile
    from .gemm import LtProblem
    from .launchplan import BoundKernel


class Stream(Protocol):
    """An ordered work queue (CUDA: a non-blocking stream, so that it can be captured)."""

    id: int  # the native handle as an int (what a launch takes; torch's ExternalStream too)

    def synchronize(self, where: str | None = None) -> None: ...
    def destroy(self) -> None: ...


class Event(Protocol):
    """A marker in a stream: :meth:`synchronize` waits for the work queued before it."""

    def record(self, stream: Stream) -> None: ...
    def synchronize(self) -> None: ...
    def elapsed_ms(self, since: "Event") -> float:
        """GPU milliseconds from ``since`` to this event (timing events, both complete)."""
    def destroy(self) -> None: ...


class Pinned(Protocol):
    """Page-locked host memory of ``nbytes`` at ``addr``, also a uint8 array ``array``."""

    addr: int
    nbytes: int
    array: "np.ndarray"

    def free(self) -> None: ...


class Arena(Protocol):
    """One device allocation: ``nbytes`` usable bytes from ``base`` (aligned as asked)."""

    base: int
    nbytes: int

    def zero(self, stream: int) -> None: ...   # queued on the stream of that ``id``
    def free(self) -> None: ...


class Step(Protocol):
    """One prepared launch: :meth:`run` queues it (on a capturing stream: records it)."""

    def run(self) -> None: ...


class Modules(Protocol):
    """A manifest's cubins, loaded."""

    def lookup(self, module: str, symbol: str) -> Sequence[int] | None:
        """Parameter byte sizes of ``symbol`` in ``module``, None if it has no such function."""

    def function(self, module: str, symbol: str) -> Any:
        """The function handle of a symbol :meth:`lookup` found."""

    def allow_dynamic_shared(self, func: Any, nbytes: int, where: str,
                             device_limit: int) -> None:
        """Let ``func`` use ``nbytes`` (> 0) of dynamic shared memory: called for every step
        that has some; raises the function's limit where static + dynamic exceed 48 KiB."""

    def unload(self) -> None: ...


class Gemm(Protocol):
    """The built-in GEMM externs (CUDA: cuBLASLt, algorithms chosen by timing)."""

    #: problem shape key -> (algorithm, microseconds, candidates timed), for the summary.
    algos: Mapping[tuple, tuple[Any, float, int]]

    def prepare(self, problem: "LtProblem", where: str) -> Step:
        """The launch of ``problem``, its algorithm chosen now (this may queue and wait for
        timing work, so never while a stream captures)."""

    def describe(self) -> str: ...
    def close(self) -> None: ...


class Graph(Protocol):
    """A captured step list; ``nodes`` and ``capture_s`` (seconds) for the summary."""

    nodes: int
    capture_s: float

    def launch(self, stream: Stream, where: str | None = None) -> None: ...
    def destroy(self) -> None: ...


class Device(Protocol):
    """One opened device (CUDA: the primary context of a GPU, current on this thread)."""

    #: Bytes of shared memory (static + dynamic) one block may opt into.
    max_shared_optin: int

    def describe(self) -> str:
        """One line for the summary: the device, its architecture, the driver."""

    def stream(self) -> Stream: ...

    def arena(self, nbytes: int, align: int, where: str) -> Arena: ...

    def modules(self, cubins: "Mapping[str, CubinFile]") -> Modules:
        """Load every cubin; one :class:`~kern_runtime.KernelArtifactError` lists those
        that cannot be loaded."""

    def kernel(self, func: Any, bound: "BoundKernel", stream: Stream) -> Step:
        """The launch of ``func`` with ``bound``'s grid, block, shared memory and arguments."""

    def gemm(self, stream: Stream) -> Gemm: ...

    def capture(self, stream: Stream, steps: Sequence[Step], where: str) -> Graph:
        """Record ``steps`` (run in order) into a graph; on failure the stream stays usable."""

    def pinned(self, nbytes: int) -> Pinned: ...

    def mapped(self, nbytes: int) -> Pinned:
        """Page-locked host memory that kernels address at the same ``addr`` (CUDA: mapped
        pinned memory under unified addressing); the copy kernel (:meth:`copies`) reads and
        writes it."""

    def event(self, timing: bool = True) -> Event: ...

    def h2d(self, dst: int, src_host: int, nbytes: int, stream: Stream,
            where: str | None = None) -> None: ...

    def d2h(self, dst_host: int, src: int, nbytes: int, stream: Stream,
            where: str | None = None) -> None: ...

    def d2d(self, dst: int, src: int, nbytes: int, stream: Stream,
            where: str | None = None) -> None: ...

    def write_words(self, words: Sequence[tuple[int, int]], stream: Stream,
                    where: str | None = None) -> None:
        """Queue a 32-bit store of each (device address, 4-aligned; value, u32) in
        ``words`` (1…255 of them) as one operation, in order, ordered like a copy; the
        values need no pinned memory (CUDA: one ``cuStreamBatchMemOp``). Never while the
        stream captures."""

    def copies(self, segments: Sequence[tuple[int, int, int]], stream: Stream,
               where: str) -> Step:
        """One launch copying every (dst, src, nbytes) segment (at most 8; no destination
        overlaps another segment's source or destination; device or :meth:`mapped`
        addresses), waiting on the grid dependency like a ``pdl`` step (CUDA:
        kern-runtime's own ``kern_rt_copies``)."""

    def release(self) -> None:
        """Give the device back (CUDA: release the primary context). Called last."""


#: A backend: a name in :data:`BACKENDS`, or a callable opening device ``ordinal``.
Backend = Union[str, Callable[[int], Device]]

#: Backend names :func:`open_device` knows.
BACKENDS = ("cuda",)


def check_backend(backend: Backend) -> None:
    """Refuse a backend that names none (before any work is done)."""
    if not callable(backend) and backend not in BACKENDS:
        raise CallerError(f"unknown backend {backend!r}",
                          help=f"backends: {', '.join(BACKENDS)}, or a callable "
                               f"ordinal -> Device")


def open_device(backend: Backend, ordinal: int) -> Device:
    """Open device ``ordinal`` of ``backend``. CUDA is imported only here, on first use."""
    check_backend(backend)
    if callable(backend):
        return backend(ordinal)
    from .cuda.device import CudaDevice
    return CudaDevice(ordinal)
