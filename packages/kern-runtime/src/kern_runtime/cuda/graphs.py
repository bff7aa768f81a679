"""CUDA graphs: capture a list of prepared steps on the runtime's stream, replay with one
``cuGraphLaunch``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from .driver import call, drv
from .memory import Stream


class Step(Protocol):
    def run(self) -> None: ...


class Graph:
    """An instantiated graph (``CUgraphExec``) and its capture statistics."""

    def __init__(self, exec_: Any, nodes: int, capture_s: float) -> None:
        self.exec = exec_
        self.nodes = nodes
        self.capture_s = capture_s

    def launch(self, stream: Stream, where: str | None = None) -> None:
        call("cuGraphLaunch", self.exec, stream.handle, where=where)

    def destroy(self) -> None:
        if self.exec is not None:
            e, self.exec = self.exec, None
            call("cuGraphExecDestroy", e)


def capture(stream: Stream, steps: Sequence[Step], where: str) -> Graph:
    """Record ``steps`` into a graph. On any failure the capture is ended and its partial
    graph destroyed, so the stream stays usable."""
    import time

    d = drv()
    t0 = time.perf_counter()
    mode = d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    call("cuStreamBeginCapture", stream.handle, mode, where=where)
    try:
        for s in steps:
            s.run()
    except BaseException:
        res = d.cuStreamEndCapture(stream.handle)
        if res[0] == d.CUresult.CUDA_SUCCESS and res[1] is not None and int(res[1]):
            d.cuGraphDestroy(res[1])
        raise
    graph = call("cuStreamEndCapture", stream.handle, where=where)
    try:
        exec_ = call("cuGraphInstantiate", graph, 0, where=where)
    finally:
        call("cuGraphDestroy", graph)
    call("cuGraphUpload", exec_, stream.handle, where=where)
    return Graph(exec_, len(steps), time.perf_counter() - t0)
