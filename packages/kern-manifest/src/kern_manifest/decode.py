"""JSON text -> :class:`~kern_manifest.schema.Manifest`, collecting every decode problem.

Two passes over the input: the stdlib JSON parser (syntax errors with line and column, and
duplicate keys, which msgspec would keep silently), then msgspec conversion of each map
entry on its own, so that one bad buffer does not hide a bad kernel and every error names
the entry it is in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from . import paths
from .diagnostics import DecodeError, Diagnostic
from .dtypes import DTYPE_SIZES, ParamTypeError, parse_param_type
from .schema import SECTIONS, Kernel, Manifest, ManifestMeta, Scratch

_REQUIRED = ("meta", "buffers", "kernels", "programs")
_TOP_KEYS = ("meta", *SECTIONS)


class _DupDict(dict):
    """A JSON object in which at least one key occurred more than once."""

    dups: list[str]


class _Scan:
    """Object hook state for one parse: whether any object had a duplicate key."""

    def __init__(self) -> None:
        self.found = False

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict:
        d = dict(pairs)
        if len(d) == len(pairs):
            return d
        self.found = True
        return _dup_dict(pairs, d)


def _dup_dict(pairs: list[tuple[str, Any]], d: dict) -> dict:
    out = _DupDict(d)
    seen: set[str] = set()
    out.dups = []
    for k, _ in pairs:
        if k in seen and k not in out.dups:
            out.dups.append(k)
        seen.add(k)
    return out


def _find_dups(value: Any, path: str, out: list[Diagnostic]) -> None:
    if isinstance(value, dict):
        if isinstance(value, _DupDict):
            for k in value.dups:
                out.append(Diagnostic(
                    "E0003", f"duplicate key `{k}`", paths.key(path, k),
                    note="JSON parsers keep only one of the values; kern refuses to guess which"))
        for k, v in value.items():
            _find_dups(v, paths.key(path, k), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _find_dups(v, paths.index(path, i), out)


def _convert_error(err: msgspec.ValidationError, base: str) -> Diagnostic:
    text = str(err)
    msg, sep, where = text.rpartition(" - at `")
    if not sep:
        msg, where = text, "$`"
    suffix = where[1:-1]  # strip "$" and the closing backtick
    path = base + suffix if base else suffix.lstrip(".")
    if msg.startswith("Object contains unknown field `"):
        name = msg.split("`")[1]
        return Diagnostic("E0004", f"unknown field `{name}`", paths.key(path, name))
    if msg.startswith("Object missing required field `"):
        name = msg.split("`")[1]
        return Diagnostic("E0005", f"missing required field `{name}`", path or "(top level)")
    help_ = None
    if msg.startswith("Invalid enum value"):
        if path.endswith(".dtype"):
            help_ = f"dtypes are {', '.join(DTYPE_SIZES)}"
        elif path.endswith(".class"):
            help_ = "buffer classes are input, output, weight, workspace, carry"
    return Diagnostic("E0006", msg[0].lower() + msg[1:] if msg else "invalid value",
                      path or "(top level)", help=help_)


def _convert(value: Any, typ: type, path: str, out: list[Diagnostic]) -> Any:
    try:
        return msgspec.convert(value, typ)
    except msgspec.ValidationError as err:
        diag = _convert_error(err, path)
        if "[...]" in diag.path and typ is Kernel:
            diag = _locate_scratch_error(value, path) or diag
        out.append(diag)
        return None


def _locate_scratch_error(kernel: Any, path: str) -> Diagnostic | None:
    """msgspec elides map keys in paths; find the scratch entry an error is in."""
    scratch = kernel.get("impl", {}).get("scratch", {}) if isinstance(kernel, dict) else {}
    if not isinstance(scratch, dict):
        return None
    for name, entry in scratch.items():
        try:
            msgspec.convert(entry, Scratch)
        except msgspec.ValidationError as err:
            return _convert_error(err, paths.key(f"{path}.impl.scratch", name))
    return None


def check_param_types(kernel: Kernel, path: str, out: list[Diagnostic]) -> None:
    def check(params: list[str], ppath: str) -> None:
        for i, text in enumerate(params):
            try:
                parse_param_type(text)
            except ParamTypeError as err:
                out.append(Diagnostic("E0007", str(err), paths.index(ppath, i)))

    check(kernel.params, f"{path}.params")
    for j, step in enumerate(kernel.impl.steps):
        check(step.params, f"{path}.impl.steps[{j}].params")


def from_obj(doc: Any, *, has_dups: bool = True) -> Manifest:
    """Convert a parsed JSON value into a :class:`Manifest`; raise :class:`DecodeError`
    with every problem found."""
    diags: list[Diagnostic] = []
    if has_dups:
        _find_dups(doc, "", diags)
    if not diags:
        # Fast path: one conversion of the whole document; on failure fall through to the
        # per-entry conversion that finds and names every problem.
        try:
            manifest = msgspec.convert(doc, Manifest)
        except msgspec.ValidationError:
            pass
        else:
            for name, kernel in manifest.kernels.items():
                check_param_types(kernel, paths.key("kernels", name), diags)
            if diags:
                raise DecodeError(diags)
            return manifest
    if not isinstance(doc, dict):
        raise DecodeError(diags + [Diagnostic(
            "E0006", f"a manifest is a JSON object, found {type(doc).__name__}", "(top level)")])
    for k in doc:
        if k not in _TOP_KEYS:
            diags.append(Diagnostic(
                "E0004", f"unknown field `{k}`", paths.key("", k),
                help=f"top-level keys are {', '.join(_TOP_KEYS)}"))
    for k in _REQUIRED:
        if k not in doc:
            diags.append(Diagnostic("E0005", f"missing required field `{k}`", "(top level)"))

    meta = _convert(doc["meta"], ManifestMeta, "meta", diags) if "meta" in doc else None
    sections: dict[str, dict] = {}
    for name, typ in SECTIONS.items():
        raw = doc.get(name, {})
        if not isinstance(raw, dict):
            diags.append(Diagnostic(
                "E0006", f"`{name}` must be an object mapping names to entries", name))
            continue
        entries = {}
        for entry_name, value in raw.items():
            path = paths.key(name, entry_name)
            entry = _convert(value, typ, path, diags)
            if entry is not None:
                if typ is Kernel:
                    check_param_types(entry, path, diags)
                entries[entry_name] = entry
        sections[name] = entries
    if diags:
        raise DecodeError(diags)
    return Manifest(meta=meta, **sections)


def decode(data: bytes | str) -> Manifest:
    """Decode manifest JSON text; raise :class:`DecodeError` with every problem found."""
    scan = _Scan()
    try:
        doc = json.loads(data, object_pairs_hook=scan)
    except json.JSONDecodeError as err:
        raise DecodeError([Diagnostic(
            "E0002", f"malformed JSON: {err.msg} (line {err.lineno}, column {err.colno})",
            "(top level)")]) from None
    except UnicodeDecodeError as err:
        raise DecodeError([Diagnostic("E0001", f"not UTF-8 text: {err.reason}", "(top level)")]) from None
    return from_obj(doc, has_dups=scan.found)


def read(path: str | Path) -> Manifest:
    """Read and decode a manifest file; errors carry the file name as their source."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise DecodeError(
            [Diagnostic("E0001", f"cannot read file: {err.strerror or err}", "(file)")], str(path)
        ) from None
    try:
        return decode(data)
    except DecodeError as err:
        raise DecodeError(err.diagnostics, str(path)) from None


def encode(manifest: Manifest, *, indent: int | None = 1) -> bytes:
    """Canonical JSON of a manifest (defaults and absent optional keys omitted)."""
    raw = msgspec.json.encode(manifest)
    return raw if indent is None else msgspec.json.format(raw, indent=indent)
