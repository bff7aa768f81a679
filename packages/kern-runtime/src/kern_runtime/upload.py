"""Stream weights from safetensors files to the device through two pinned staging buffers.

Host memory use is bounded by ``2 × chunk_bytes`` whatever the weights' size: while one
chunk is copied to the device, the next is read from the file into the other buffer. The
device is reached only through ``dev`` (:class:`~kern_runtime.device.Device`: pinned
buffers, events, host-to-device copies on ``stream``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from .device import Device, Stream
from .errors import WeightArtifactError
from .weights import UploadChunk

CHUNK_BYTES = 64 * 2**20

#: progress(bytes done, bytes total)
Progress = Callable[[int, int], None]


def upload(dev: Device, chunks: Iterable[UploadChunk], dst: Mapping[str, int], stream: Stream,
           total: int, chunk_bytes: int = CHUNK_BYTES, progress: Progress | None = None) -> float:
    """Copy every chunk to ``dst[buffer] + dst_offset``; returns the seconds it took."""
    t0 = time.perf_counter()
    size = max(1, min(chunk_bytes, total))
    bufs = [dev.pinned(size), dev.pinned(size)]
    events = [dev.event(timing=False), dev.event(timing=False)]
    used = [False, False]
    files: dict[str, object] = {}
    done = 0
    try:
        for i, ch in enumerate(chunks):
            slot = i % 2
            if used[slot]:
                events[slot].synchronize()  # the copy that last used this buffer is done
            f = files.get(ch.file)
            if f is None:
                for old in files.values():
                    old.close()  # type: ignore[attr-defined]
                files = {ch.file: open(ch.file, "rb")}
                f = files[ch.file]
            view = memoryview(bufs[slot].array)[:ch.nbytes]
            f.seek(ch.file_offset)  # type: ignore[attr-defined]
            got = 0
            while got < ch.nbytes:
                n = f.readinto(view[got:])  # type: ignore[attr-defined]
                if not n:
                    raise WeightArtifactError(f"file ended early at byte {ch.file_offset + got}",
                                              where=f"weight `{ch.buffer}` in `{ch.file}`")
                got += n
            dev.h2d(dst[ch.buffer] + ch.dst_offset, bufs[slot].addr, ch.nbytes, stream,
                    where=f"weight `{ch.buffer}` upload")
            events[slot].record(stream)
            used[slot] = True
            done += ch.nbytes
            if progress is not None:
                progress(done, total)
        stream.synchronize(where="weight upload")
    finally:
        for f in files.values():
            f.close()  # type: ignore[attr-defined]
        # free only after the copies that read the staging buffers finished
        try:
            stream.synchronize()
        finally:
            for e in events:
                e.destroy()
            for b in bufs:
                b.free()
    return time.perf_counter() - t0


def default_progress(done: int, total: int) -> None:
    """``Runtime.load``'s progress: weight uploads of 1 GiB or more on stderr, in place."""
    import sys
    if total >= 2**30:
        pct = 100 * done // total
        sys.stderr.write(f"\rweights: {done / 2**30:.2f} / {total / 2**30:.2f} GiB ({pct}%)")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()
