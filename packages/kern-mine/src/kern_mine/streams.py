"""Opening capture files as text, compressed or not (by suffix: ``.gz``, ``.xz``, ``.zst``),
and naming what a damaged stream raises: the decompressors' errors differ per format and a
truncated stream shows only when it is read, so the reader maps them to one message."""

from __future__ import annotations

import gzip
import io
import lzma
import zlib
from pathlib import Path
from typing import IO

from kern_manifest import KernError


class CaptureFormatError(KernError, ValueError):
    """A capture file that does not follow the format (with file and line where known)."""


def _zstd_open(path: Path) -> IO[bytes]:
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python >= 3.14

        return zstd.open(path, "rb")
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError as e:
        raise CaptureFormatError(f"{path}: reading .zst needs Python >= 3.14 or the zstandard package") from e
    # Buffered: the stream reader has readinto but no readline, which line iteration needs.
    return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(path.open("rb"), closefd=True))


def open_binary(path: Path) -> IO[bytes]:
    suffix = path.suffix
    if suffix == ".gz":
        return gzip.open(path, "rb")
    if suffix == ".xz":
        return lzma.open(path, "rb")
    if suffix == ".zst":
        return _zstd_open(path)
    return path.open("rb")


def open_text(path: str | Path) -> IO[str]:
    """Opens a (possibly compressed, by suffix: .gz .xz .zst) text file for reading."""
    return io.TextIOWrapper(open_binary(Path(path)), encoding="utf-8", newline="\n")


def stream_errors() -> tuple[type[BaseException], ...]:
    """What reading a (compressed) text stream raises on bad data, zstd's error included."""
    errors: list[type[BaseException]] = [OSError, EOFError, lzma.LZMAError, zlib.error]
    for module, name in (("compression.zstd", "ZstdError"), ("zstandard", "ZstdError")):
        try:
            errors.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


STREAM_ERRORS = stream_errors()


def stream_problem(e: BaseException) -> str:
    if isinstance(e, EOFError):
        return "the compressed stream ends early: the file is truncated"
    if isinstance(e, (gzip.BadGzipFile, zlib.error, lzma.LZMAError)) or not isinstance(e, OSError):
        return f"corrupt compressed data ({e})"
    return e.strerror or str(e)


