"""Whether a GPU is usable, and its memory: the two questions asked before a load."""

from __future__ import annotations


def gpu_memory(device: int = 0) -> tuple[int, int]:
    """(free, total) bytes of GPU ``device`` now; raises :class:`CudaError` without one."""
    from .cuda.driver import memory
    return memory(device)


def gpu_available() -> tuple[bool, str]:
    """(usable, reason): whether a CUDA device and driver are present. Never raises."""
    from .cuda.driver import probe
    return probe()

