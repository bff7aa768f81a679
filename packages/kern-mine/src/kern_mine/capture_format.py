"""Reader for the kern capture format (``capture/FORMAT.md``, version 1).

A capture is a directory written by ``capture/libkerncapture.so`` for one process::

    meta.json  launches.jsonl[.gz|.xz|.zst]  modules.jsonl  modules/<sha256>.cubin  summary.json

This module turns it into typed, immutable records and nothing more: no mining, no
interpretation.  It depends on the standard library and msgspec only.  ``.zst`` files need
``compression.zstd`` (Python 3.14+) or the ``zstandard`` package; without either they raise
:class:`CaptureFormatError`.

Entry points: :func:`read_capture` (a directory or a launches file -> :class:`Capture`),
:func:`iter_launches` (stream the launches of a file), :func:`open_text` (decompress by suffix).

Every way a file can be bad ends in :class:`CaptureFormatError`, whose message names the file
and, where known, the line: a path that does not exist or cannot be read, a corrupt or
truncated compressed stream, bytes that are not UTF-8, a record that does not decode (wrong
types, integers outside 64 bits, nesting too deep, byte strings that are not hex). The one
tolerated defect is a partial *last* line (the capturing process was cut short mid-write):
it is dropped and its line number kept in :attr:`Capture.partial_line`, for the caller to
warn about.
"""

from __future__ import annotations

import lzma
from collections.abc import Iterator
from pathlib import Path

import msgspec

from .streams import STREAM_ERRORS, CaptureFormatError, open_binary, stream_problem, open_text

__all__ = [
    "FORMAT_VERSION",
    "LAUNCH_FILE_NAMES",
    "Capture",
    "CaptureFormatError",
    "FuncAttrs",
    "Launch",
    "LaunchAttr",
    "Meta",
    "ModuleEntry",
    "Param",
    "Ptr",
    "Summary",
    "find_launches_file",
    "iter_launches",
    "open_text",
    "read_capture",
    "read_modules",
]

FORMAT_VERSION = 1
"""The newest format version this reader understands."""

LAUNCH_FILE_NAMES = ("launches.jsonl", "launches.jsonl.zst", "launches.jsonl.xz", "launches.jsonl.gz")


def _not_hex(s: str) -> bool:
    """Not hex of whole bytes (FORMAT.md writes lowercase), i.e. what ``bytes.fromhex``
    cannot read back (isalnum first: fromhex would skip whitespace). Parameters average ~200
    hex digits in real captures: fromhex is the fastest full check (~6 ns a digit; a regex
    ~10, a msgspec pattern or str.strip 25+)."""
    if s and not s.isalnum():
        return True
    try:
        bytes.fromhex(s)
    except ValueError:
        return True
    return False


def _launch_problem(launch: "Launch") -> str | None:
    """What makes a decoded launch record unusable (its byte strings), or None."""
    for i, p in enumerate(launch.params or ()):
        if _not_hex(p.hex):
            return f"`params[{i}].bytes` is not hex of whole bytes"
    if launch.raw is not None and _not_hex(launch.raw):
        return "`raw` is not hex of whole bytes"
    for i, a in enumerate(launch.attrs):
        if _not_hex(a.raw):
            return f"`attrs[{i}].raw` is not hex of whole bytes"
    return None


class Ptr(msgspec.Struct, frozen=True):
    """An 8-byte word of a parameter that lies inside a device allocation."""

    at: int
    """Byte offset of the word inside its parameter."""
    value: int
    range_start: int
    range_size: int
    offset: int
    """``value - range_start``."""


class Param(msgspec.Struct, frozen=True):
    """One kernel parameter: its slot in the parameter space and the bytes passed."""

    offset: int
    size: int
    hex: str = msgspec.field(name="bytes")
    ptrs: tuple[Ptr, ...] = ()

    @property
    def data(self) -> bytes:
        """The parameter's bytes (little-endian for numbers)."""
        return bytes.fromhex(self.hex)

    def as_int(self, signed: bool = False) -> int:
        """The bytes as a little-endian integer (any size)."""
        return int.from_bytes(self.data, "little", signed=signed)


class LaunchAttr(msgspec.Struct, frozen=True):
    """A ``cuLaunchKernelEx`` launch attribute."""

    id: int
    name: str | None = None
    value: int | tuple[int, ...] | None = None
    raw: str = ""


class FuncAttrs(msgspec.Struct, frozen=True):
    """Static function attributes (``cuFuncGetAttribute``)."""

    regs: int
    static_smem: int
    local_mem: int
    const_mem: int
    max_threads: int
    binary_version: int
    ptx_version: int
    required_cluster: tuple[int, int, int] = (0, 0, 0)


class Launch(msgspec.Struct, frozen=True):
    """One kernel launch (FORMAT.md, ``launches.jsonl``)."""

    seq: int
    t_ns: int
    api: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    name: str | None = None
    module: str | None = None
    module_id: int | None = None
    module_how: str | None = None
    tid: int = 0
    result: int = 0
    ctx: int = 0
    stream: int = 0
    capturing: bool | None = None
    handle: str = "function"
    attrs: tuple[LaunchAttr, ...] = ()
    fattr: FuncAttrs | None = None
    args: str = "params"
    extra_size: int | None = None
    params: tuple[Param, ...] | None = None
    raw: str | None = None

    @property
    def executed(self) -> bool:
        """True unless the launch was recorded into a graph under stream capture or failed."""
        return self.capturing is not True and self.result == 0

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


class ModuleEntry(msgspec.Struct, frozen=True):
    """One module load (FORMAT.md, ``modules.jsonl``)."""

    module_id: int
    sha256: str | None
    size: int
    t_ns: int = 0
    ctx: int = 0


class Meta(msgspec.Struct, frozen=True):
    format: str
    version: int
    pid: int = 0
    ppid: int = 0
    clock: str = "CLOCK_MONOTONIC"
    start_t_ns: int = 0
    start_unix_s: int = 0
    driver_version: int | None = None
    options: dict[str, int | str | None] = {}
    cmdline: tuple[str, ...] = ()


class Summary(msgspec.Struct, frozen=True):
    launches: int
    dropped: int = 0
    end_t_ns: int = 0


class Capture(msgspec.Struct):
    """A whole capture directory, read into memory."""

    path: Path
    """The capture directory."""
    launches_path: Path
    meta: Meta | None
    summary: Summary | None
    """None when the process did not exit cleanly (``summary.json`` missing)."""
    modules: list[ModuleEntry]
    launches: list[Launch]
    partial_line: int | None = None
    """Line number of a partial last line of the launches file (dropped): the capturing
    process was cut short mid-write. None when the file ended cleanly."""

    @property
    def truncated(self) -> bool:
        """The launches file ended in a partial line (dropped)."""
        return self.partial_line is not None

    def module_file(self, sha256: str) -> Path | None:
        """The dumped cubin of a module (``modules/<sha256>.cubin``, or ``.cubin.xz`` in
        committed fixtures), if present in the directory."""
        for name in (f"{sha256}.cubin", f"{sha256}.cubin.xz"):
            p = self.path / "modules" / name
            if p.is_file():
                return p
        return None

    def module_bytes(self, sha256: str) -> bytes | None:
        """The module image (decompressed), or None if it was not kept."""
        p = self.module_file(sha256)
        if p is None:
            return None
        return lzma.decompress(p.read_bytes()) if p.suffix == ".xz" else p.read_bytes()


def find_launches_file(directory: str | Path) -> Path:
    """The launches file of a capture directory (plain first, then .zst, .xz, .gz)."""
    directory = Path(directory)
    for name in LAUNCH_FILE_NAMES:
        p = directory / name
        if p.is_file():
            return p
    raise CaptureFormatError(f"{directory}: no launches file ({', '.join(LAUNCH_FILE_NAMES)})")


def _iter_jsonl(path: Path, typ: type, state: dict[str, int] | None = None,
                problem=lambda record: None) -> Iterator:
    """Records of a JSON-lines file; a partial last line is dropped and, with ``state``,
    its number stored under ``"partial_line"`` (without, it is an error). ``problem(record)``
    names what the types cannot say about a record. Lines are read as bytes: msgspec checks
    the UTF-8 of every string it keeps, so a bad byte is named by its line (a text stream
    would fail at the chunk holding it, lines earlier)."""
    decoder = msgspec.json.Decoder(typ)
    lineno = 0
    try:
        with open_binary(path) as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = decoder.decode(line)
                except (msgspec.DecodeError, RecursionError) as e:
                    why = "nesting too deep" if isinstance(e, RecursionError) else str(e)
                    if not line.endswith(b"\n") and state is not None:
                        # The last line lacks its newline: the writer was cut short mid-record.
                        state["partial_line"] = lineno
                        return
                    raise CaptureFormatError(f"{path}:{lineno}: {why}") from None
                why = problem(record)
                if why is not None:
                    raise CaptureFormatError(f"{path}:{lineno}: {why}")
                yield record
    except STREAM_ERRORS as e:
        where = f"{path}: after line {lineno}" if lineno else str(path)
        raise CaptureFormatError(f"{where}: {stream_problem(e)}") from None


def iter_launches(path: str | Path, *, _state: dict[str, int] | None = None) -> Iterator[Launch]:
    """Streams the launch records of a launches file (plain or compressed), in file order."""
    return _iter_jsonl(Path(path), Launch, _state, _launch_problem)


def read_modules(directory: str | Path) -> list[ModuleEntry]:
    """The module index of a capture directory ([] if it has none)."""
    directory = Path(directory)
    for name in ("modules.jsonl", "modules.jsonl.zst", "modules.jsonl.xz", "modules.jsonl.gz"):
        p = directory / name
        if p.is_file():
            return list(_iter_jsonl(p, ModuleEntry))
    return []


def _read_json(path: Path, typ: type):
    if not path.is_file():
        return None
    try:
        return msgspec.json.decode(path.read_bytes(), type=typ)
    except msgspec.DecodeError as e:
        raise CaptureFormatError(f"{path}: {e}") from None
    except RecursionError:
        raise CaptureFormatError(f"{path}: nesting too deep") from None
    except OSError as e:
        raise CaptureFormatError(f"{path}: {e.strerror or e}") from None


def _resolve_dir(path: Path) -> Path:
    """A capture directory, or a base directory holding exactly one ``pid-*`` capture."""
    if any((path / n).is_file() for n in LAUNCH_FILE_NAMES):
        return path
    subs = sorted(p for p in path.glob("pid-*") if p.is_dir())
    if len(subs) == 1:
        return subs[0]
    if not subs:
        raise CaptureFormatError(f"{path}: not a capture directory (no launches file, no pid-* directory)")
    raise CaptureFormatError(f"{path}: holds {len(subs)} pid-* captures; pass one of them")


def read_capture(path: str | Path) -> Capture:
    """Reads a capture: a capture directory, a base directory holding one ``pid-*``
    capture, or a launches file (its directory supplies meta, modules and summary)."""
    path = Path(path)
    if not path.exists():
        raise CaptureFormatError(f"{path}: does not exist")
    if path.is_file():
        directory, launches_path = path.parent, path
    else:
        directory = _resolve_dir(path)
        launches_path = find_launches_file(directory)
    meta = _read_json(directory / "meta.json", Meta)
    if meta is not None:
        if meta.format != "kern-capture":
            raise CaptureFormatError(f"{directory}/meta.json: format {meta.format!r} is not 'kern-capture'")
        if meta.version > FORMAT_VERSION:
            raise CaptureFormatError(
                f"{directory}/meta.json: format version {meta.version} is newer than this reader ({FORMAT_VERSION})"
            )
    state: dict[str, int] = {}
    launches = list(iter_launches(launches_path, _state=state))
    return Capture(
        path=directory,
        launches_path=launches_path,
        meta=meta,
        summary=_read_json(directory / "summary.json", Summary),
        modules=read_modules(directory),
        launches=launches,
        partial_line=state.get("partial_line"),
    )
