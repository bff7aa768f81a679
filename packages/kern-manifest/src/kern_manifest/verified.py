"""A :class:`VerifiedManifest` is the only thing later stages (generators' tests, the
runtime) accept: it can only be obtained from a manifest that verified clean."""

from __future__ import annotations

from pathlib import Path

from .decode import read
from .diagnostics import VerificationError
from .dtypes import ParamType, parse_param_type
from .expr import corners
from .schema import Manifest
from .verify import verify

_TOKEN = object()


class VerifiedManifest:
    """A manifest that passed every verifier rule, plus facts derived once at check time."""

    __slots__ = ("manifest", "source", "params", "step_params", "sym_min", "sym_max")

    def __init__(self, manifest: Manifest, source: str | None, token: object) -> None:
        if token is not _TOKEN:
            raise TypeError("use kern_manifest.check() or kern_manifest.load()")
        self.manifest = manifest
        self.source = source
        #: Parsed interface parameter types, per kernel.
        self.params: dict[str, list[ParamType]] = {
            n: [parse_param_type(p) for p in k.params] for n, k in manifest.kernels.items()
        }
        #: Parsed step parameter types, per kernel then step.
        self.step_params: dict[str, list[list[ParamType]]] = {
            n: [[parse_param_type(p) for p in s.params] for s in k.impl.steps]
            for n, k in manifest.kernels.items()
        }
        self.sym_min, self.sym_max = corners(manifest.symbols)

    def check_symbols(self, values: dict[str, int]) -> None:
        """Raise ``ValueError`` naming the symbol if ``values`` is incomplete or out of range."""
        for name, s in self.manifest.symbols.items():
            if name not in values:
                raise ValueError(f"symbol `{name}` needs a value in [{s.min}, {s.max}]")
            v = values[name]
            if not s.min <= v <= s.max:
                raise ValueError(f"symbol `{name}` = {v} is outside [{s.min}, {s.max}]")
        for name in values:
            if name not in self.manifest.symbols:
                raise ValueError(f"unknown symbol `{name}`")


def check(manifest: Manifest, source: str | None = None) -> VerifiedManifest:
    """Verify ``manifest``; raise :class:`VerificationError` with every diagnostic."""
    diags = verify(manifest)
    if diags:
        raise VerificationError(diags, source)
    return VerifiedManifest(manifest, source, _TOKEN)


def load(path: str | Path) -> VerifiedManifest:
    """Read, decode and verify a manifest file."""
    return check(read(path), str(path))
