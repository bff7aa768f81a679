"""GPU timing events on a loaded runtime's stream, for callers that split a step's GPU time
by program (kern-run's DSpark loop: :mod:`kern_run.spec.dspark_timing`).

:func:`timing_event` makes one event; :meth:`TimingEvent.record` queues it behind the work
queued so far; :meth:`TimingEvent.elapsed_ms` is the GPU time in milliseconds between an
earlier recorded event and this one. It does not wait: both events must already be complete
(the caller knows, e.g. after a read queued behind them returned); otherwise the driver's
``CUDA_ERROR_NOT_READY`` is raised as a :class:`~kern_runtime.CudaError`. Release with
:meth:`TimingEvent.close` before the runtime is closed."""

from __future__ import annotations

from typing import Any

from .errors import CallerError


class TimingEvent:
    def __init__(self, rt: Any) -> None:
        from .runtime import Runtime
        if not isinstance(rt, Runtime):
            raise CallerError(f"timing events need a loaded kern_runtime.Runtime, not "
                              f"{type(rt).__name__}")
        rt._check_open()
        self._rt = rt
        self._ev = rt._dev.event(timing=True)

    def record(self) -> None:
        self._rt._check_open()
        self._ev.record(self._rt._stream)

    def elapsed_ms(self, start: "TimingEvent") -> float:
        """GPU milliseconds from ``start`` to this event (both recorded and complete)."""
        return float(self._ev.elapsed_ms(start._ev))

    def close(self) -> None:
        if self._ev is not None:
            ev, self._ev = self._ev, None
            ev.destroy()


def timing_event(rt: Any) -> TimingEvent:
    """One timing event on ``rt``'s stream (see the module docstring)."""
    return TimingEvent(rt)
