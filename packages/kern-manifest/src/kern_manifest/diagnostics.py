"""Diagnostics are data: a stable code, a message, a JSON path, an optional note and help.

Codes are documented in :mod:`kern_manifest.codes`; ``kern-manifest explain CODE`` prints
the long form. Rendering lives in :mod:`kern_manifest.render`.
"""

from __future__ import annotations

import re

import msgspec

from .errors import KernError

LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` with every lone surrogate written as a ``\\udXXX`` escape: safe to print or
    encode as UTF-8 (diagnostics quote names taken from the input, file names may hold
    undecodable bytes)."""
    if LONE_SURROGATE.search(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class Diagnostic(msgspec.Struct, frozen=True, omit_defaults=True):
    code: str
    message: str
    path: str
    note: str | None = None
    help: str | None = None
    severity: str = "error"


class Sink:
    """Collects diagnostics for one verification run."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[Diagnostic] = []

    def error(
        self, code: str, message: str, path: str, *, note: str | None = None, help: str | None = None
    ) -> None:
        self.items.append(Diagnostic(code, message, path, note, help))


class ManifestError(KernError):
    """A manifest that could not be read, decoded or verified; carries every diagnostic
    (``code`` is the first one's)."""

    def __init__(self, diagnostics: list[Diagnostic], source: str | None = None) -> None:
        self.diagnostics = list(diagnostics)
        self.source = source
        first = self.diagnostics[0] if self.diagnostics else None
        summary = f"{first.code} at {first.path}: {first.message}" if first else "invalid manifest"
        more = len(self.diagnostics) - 1
        if more > 0:
            summary += f" (and {more} more)"
        super().__init__(printable(summary), where=printable(source) if source else None,
                         code=first.code if first else None)


class DecodeError(ManifestError):
    """The input is not a well-formed manifest document (exit status 2 in the CLI)."""


class VerificationError(ManifestError):
    """The manifest decoded but breaks verifier rules (exit status 1 in the CLI)."""

    exit_code = 1


class EncodeError(ManifestError):
    """A manifest (built in code) that JSON cannot carry faithfully: ``encode`` refuses what
    ``decode`` would refuse (lone surrogates, non-finite numbers, over-long integers)."""
