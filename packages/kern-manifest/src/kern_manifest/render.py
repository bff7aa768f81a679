"""Rendering diagnostics: rustc's style for people, JSON for machines."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from .codes import CODES
from .diagnostics import Diagnostic

JSON_FORMAT_VERSION = 1


def render_human(diags: Sequence[Diagnostic], source: str | None = None) -> str:
    """rustc-style text: one block per diagnostic, then a summary line."""
    where = source or "<manifest>"
    blocks = []
    for d in diags:
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
    return "\n\n".join(blocks) + ("\n" if blocks else "")


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
        _FileReport(f, not ds, list(ds), stage if ds else None) for f, stage, ds in results
    ])
    return msgspec.json.format(msgspec.json.encode(report), indent=2).decode() + "\n"


def title(code: str) -> str:
    return CODES[code].title
