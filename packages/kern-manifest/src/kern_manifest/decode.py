"""JSON text -> :class:`~kern_manifest.schema.Manifest`, collecting every decode problem.

Two passes over the input: the bounded JSON reader (:mod:`kern_manifest.bounded`: UTF-8,
syntax errors with line and column, duplicate keys, which msgspec would keep silently, and
the limits on nesting, numbers and Unicode), then msgspec conversion of each map entry on
its own, so that one bad buffer does not hide a bad kernel and every error names the entry
it is in. ``encode`` holds its output to the same limits, so what it writes decodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from . import bounded, paths
from .diagnostics import DecodeError, Diagnostic, EncodeError
from .dtypes import DTYPE_SIZES, ParamTypeError, parse_param_type
from .schema import SECTIONS, Kernel, Manifest, ManifestMeta, Scratch

_REQUIRED = ("meta", "buffers", "kernels", "programs")
_TOP_KEYS = ("meta", *SECTIONS)


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
    if msg.startswith("an expression nests"):
        return Diagnostic("E0009", msg, path or "(top level)")
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
    # ``value`` passed check_tree: nested at most MAX_DEPTH, so msgspec cannot recurse out.
    try:
        return msgspec.convert(value, typ)
    except RecursionError:  # only from a non-JSON container check_tree does not walk
        out.append(bounded.depth_diagnostic(path))
        return None
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


def from_obj(doc: Any, *, checked: bool = False) -> Manifest:
    """Convert a parsed JSON value (a dict built in code, or what the JSON reader returned)
    into a :class:`Manifest`; raise :class:`DecodeError` with every problem found.

    ``doc`` is held to the reader's limits (:func:`kern_manifest.bounded.check_tree`) unless
    ``checked`` says :func:`decode` already did: its screened fast path leaves only nesting
    unchecked, and a document that converts in one go is nested no deeper than the schema
    allows (expressions bound their own depth)."""
    diags: list[Diagnostic] = [] if checked else bounded.check_tree(doc)
    if not diags:
        # Fast path: one conversion of the whole document; on failure fall through to the
        # per-entry conversion that finds and names every problem.
        try:
            manifest = msgspec.convert(doc, Manifest)
        except (msgspec.ValidationError, RecursionError):
            pass
        else:
            for name, kernel in manifest.kernels.items():
                check_param_types(kernel, paths.key("kernels", name), diags)
            if diags:
                raise DecodeError(diags)
            return manifest
        if checked:
            diags = bounded.check_tree(doc)  # the fast path did not check nesting
    if diags:
        raise DecodeError(diags)
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
    return from_obj(bounded.parse(data), checked=True)


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
    """Canonical JSON of a manifest (defaults and absent optional keys omitted).

    Raises :class:`EncodeError`, naming each place, for what :func:`decode` would refuse
    (lone surrogates, non-finite numbers such as an ``f32`` literal of inf or NaN, which
    JSON cannot write, over-long integers, nesting): ``decode(encode(m)) == m`` for every
    manifest ``encode`` accepts."""
    try:
        doc = msgspec.to_builtins(manifest)
    except RecursionError:
        raise EncodeError([bounded.depth_diagnostic("(top level)")]) from None
    diags = bounded.check_tree(doc)
    if diags:
        raise EncodeError(diags)
    raw = msgspec.json.encode(doc)
    return raw if indent is None else msgspec.json.format(raw, indent=indent)
