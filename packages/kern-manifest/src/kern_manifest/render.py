"""Rendering diagnostics: rustc's style for people, JSON for machines.

Both renderings are valid UTF-8 whatever the diagnostics quote: names from the input and
file names may hold lone surrogates, which are written as ``\\udXXX`` escapes
(:func:`~kern_manifest.diagnostics.printable`)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from .codes import CODES
from .diagnostics import Diagnostic, printable
from .locate import locate

JSON_FORMAT_VERSION = 1


def _snippet(text_lines: list[str], line: int, col: int, label: str) -> list[str]:
    src = text_lines[line - 1].rstrip("\n")
    # Long lines are cut to a window around the column so the caret stays readable.
    if len(src) > _WIDTH:
        start = max(0, min(col - 1 - _WIDTH // 3, len(src) - _WIDTH))
        src = ("..." if start else "") + src[start:start + _WIDTH] + (
            "..." if start + _WIDTH < len(src) else "")
        col = col - start + (3 if start else 0)
    gutter = " " * len(str(line))
    if len(label) > _WIDTH:  # a path into deep nesting: its ends say where (JSON has it all)
        label = label[:_WIDTH // 2 - 2] + "..." + label[-(_WIDTH // 2 - 1):]
    return [f"{gutter} |", f"{line} | {src}", f"{gutter} | {' ' * (col - 1)}^ {label}"]


_WIDTH = 100


def render_human(diags: Sequence[Diagnostic], source: str | None = None,
                 text: str | None = None) -> str:
    """rustc-style text: one block per diagnostic, then a summary line. With the manifest's
    ``text``, each block shows the line the JSON path points at."""
    where = source or "<manifest>"
    positions: dict[str, tuple[int, int]] = {}
    text_lines: list[str] = []
    if text is not None and any(not d.path.startswith("(") for d in diags):
        try:
            positions = locate(text)
            text_lines = text.splitlines()
        except (IndexError, AttributeError, ValueError):
            positions = {}  # not valid JSON: the E0002 message already names line and column
    blocks = []
    for d in diags:
        pos = positions.get(d.path)
        if pos:
            lines = [f"{d.severity}[{d.code}]: {d.message}", f"  --> {where}:{pos[0]}:{pos[1]}"]
            lines += _snippet(text_lines, pos[0], pos[1], d.path)
        else:
            lines = [f"{d.severity}[{d.code}]: {d.message}", f"  --> {where}: {d.path}"]
        if d.note:
            lines.append(f"   = note: {d.note}")
        if d.help:
            lines.append(f"   = help: {d.help}")
        blocks.append("\n".join(lines))
    n = len(diags)
    if n:
        codes = sorted({d.code for d in diags})
        blocks.append(
            f"error: {where}: {n} error{'s' if n != 1 else ''} found\n"
            f"For more information about a code, try `kern-manifest explain {codes[0]}`."
        )
    return printable("\n\n".join(blocks) + ("\n" if blocks else ""))


class _FileReport(msgspec.Struct, omit_defaults=True):
    file: str
    ok: bool
    diagnostics: list[Diagnostic]
    stage: str | None = None


class _Report(msgspec.Struct):
    version: int
    files: list[_FileReport]


def render_json(results: Sequence[tuple[str, str | None, Sequence[Diagnostic]]]) -> str:
    """JSON report for ``(file, stage, diagnostics)`` triples; ``stage`` is ``"decode"``
    when the file could not be decoded, ``"verify"`` when it decoded but failed rules."""
    report = _Report(JSON_FORMAT_VERSION, [
        _FileReport(printable(f), not ds, [_printable(d) for d in ds], stage if ds else None)
        for f, stage, ds in results
    ])
    return msgspec.json.format(msgspec.json.encode(report), indent=2).decode() + "\n"


def _printable(d: Diagnostic) -> Diagnostic:
    fields = ("message", "path", "note", "help")
    clean = {k: printable(v) for k in fields if isinstance(v := getattr(d, k), str)}
    if all(clean[k] is getattr(d, k) for k in clean):
        return d
    return msgspec.structs.replace(d, **clean)


def title(code: str) -> str:
    return CODES[code].title
