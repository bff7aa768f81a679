"""The bounded JSON reader under the decoder: the limits every manifest text is held to.

Manifests come from files kern did not write, so before the schema looks at a document its
text is held to limits that keep every later stage (the stdlib JSON parser, msgspec, the
verifier's helpers, rendering, ``encode``) inside its contract:

- the text is UTF-8 (``E0001``, naming the byte offset and line of the first bad byte);
- every string and key is valid Unicode: a ``\\uD800``-``\\uDFFF`` escape that is not half
  of a surrogate pair leaves a lone surrogate, which no UTF-8 writer can print (``E0008``);
- arrays and objects nest at most :data:`MAX_DEPTH` levels (``E0009``, at the path of the
  first value past the limit; the format itself needs 12 levels with the deepest
  expressions generators write);
- an integer literal has at most :data:`MAX_INT_DIGITS` digits (every integer of the format
  fits in 64 bits, i.e. 20 digits; the bound also keeps decoding independent of Python's
  process-wide int/str conversion limit, which may be set as low as 640 digits), and every
  number is finite: ``NaN`` and ``Infinity`` (not JSON, though Python's parser reads them)
  and literals such as ``1e400`` that overflow a 64-bit float are refused (``E0010``).

:func:`check_tree` applies the same limits to a parsed value (a dict built in code, or what
``encode`` is about to write), so what decodes and what encodes are the same set.

Cost on the common path: a UTF-8 decode and one regular-expression screen over the text
(a few ms for 500 kB); only a text the screen flags, or one the C parser cannot nest
through, takes the exact path that finds the place of every problem.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from . import paths
from .diagnostics import LONE_SURROGATE, DecodeError, Diagnostic

#: Deepest nesting of arrays and objects a manifest may have (the top-level object is 1).
MAX_DEPTH = 64
#: Most digits an integer literal may have.
MAX_INT_DIGITS = 100
_INT_LIMIT = 10**MAX_INT_DIGITS
_NONFINITE_NOTE = "JSON has no infinity or NaN; every number in a manifest is finite"

# The screen (:func:`_suspect`) works on the UTF-8 bytes with C-speed searches only (a regex
# over 500 kB of text costs ~10 ms, these ~2 ms): digits map to "0" and everything else to
# " ", so an integer literal longer than MAX_INT_DIGITS is a run of "0"s.
_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_INT = b"0" * (MAX_INT_DIGITS + 1)
# Tokens of the depth scan: strings (possibly unterminated), brackets, separators.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{},:]')


class _DupDict(dict):
    """A JSON object in which at least one key occurred more than once."""

    dups: list[str]


class _Unrepresentable:
    """Stands in for a number literal the decoder refuses, so the tree check can name its
    place: ``text`` is the literal as written, ``why`` the reason, ``note`` an optional note."""

    __slots__ = ("text", "why", "note")

    def __init__(self, text: str, why: str, note: str | None = None) -> None:
        self.text, self.why, self.note = text, why, note


class _Hooks:
    """``json.loads`` hooks of one parse; ``flagged`` says the tree needs the exact check."""

    def __init__(self) -> None:
        self.flagged = False

    def pairs(self, pairs: list[tuple[str, Any]]) -> dict:
        d = dict(pairs)
        if len(d) == len(pairs):
            return d
        self.flagged = True
        out = _DupDict(d)
        seen: set[str] = set()
        out.dups = []
        for k, _ in pairs:
            if k in seen and k not in out.dups:
                out.dups.append(k)
            seen.add(k)
        return out

    def float_(self, text: str) -> Any:
        value = float(text)
        if math.isfinite(value):
            return value
        self.flagged = True
        return _Unrepresentable(text, "overflows a 64-bit float", _NONFINITE_NOTE)

    def constant(self, text: str) -> Any:
        self.flagged = True
        return _Unrepresentable(text, "is not a JSON number", _NONFINITE_NOTE)

    def int_(self, text: str) -> Any:
        if len(text.lstrip("-")) <= MAX_INT_DIGITS:
            return int(text)
        self.flagged = True
        return _Unrepresentable(
            text, f"has {len(text.lstrip('-'))} digits; at most {MAX_INT_DIGITS} are read")


def _text_of(data: bytes | str) -> tuple[str, bytes | None]:
    """Manifest input as text, and its UTF-8 bytes when it holds no surrogate (None: it
    does, only possible for ``str`` input). Raises :class:`DecodeError` (E0001) naming the
    first byte that is not UTF-8; a UTF-8 byte-order mark is skipped."""
    if isinstance(data, str):
        try:
            return data, data.encode("utf-8")
        except UnicodeEncodeError:
            return data, None
    try:
        return data.decode("utf-8-sig"), data
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DecodeError([Diagnostic(
            "E0001", f"not UTF-8 text: {err.reason} (byte 0x{data[err.start]:02x} at offset "
            f"{err.start}, line {line})", "(top level)")]) from None


def _suspect(raw: bytes | None) -> bool:
    """Whether the text may break a limit other than nesting (never False when it does:
    a lone-surrogate escape, an over-long integer, ``NaN``/``Infinity``; a finite-looking
    float literal that overflows is caught by the parse_float hook)."""
    if raw is None:
        return True
    return ((b"\\u" in raw and _ESCAPE.search(raw) is not None) or b"NaN" in raw
            or b"Infinity" in raw or _LONG_INT in raw.translate(_DIGITS))


def parse(data: bytes | str) -> Any:
    """The JSON value of manifest text; raises :class:`DecodeError` with every problem found
    (E0001 encoding, E0002 syntax, E0003 duplicate keys, E0008-E0010 limits).

    Nesting is checked here only where the C parser cannot follow it (about 1000 levels):
    a value from the fast path may still nest past MAX_DEPTH, which ``decode`` leaves to
    the schema (a document that converts to a Manifest nests at most 39 levels) and, when
    conversion fails, to :func:`check_tree`."""
    text, raw = _text_of(data)
    hooks = _Hooks()
    if not _suspect(raw):
        try:
            doc = json.loads(text, object_pairs_hook=hooks.pairs, parse_float=hooks.float_,
                             parse_constant=hooks.constant)
        except RecursionError:
            pass  # deeper than the C parser nests: the exact path names the place
        except json.JSONDecodeError as err:
            raise _syntax_error(err) from None
        else:
            if hooks.flagged:
                _raise_if(check_tree(doc))
            return doc
    path = _too_deep(text)
    if path is not None:
        raise DecodeError([depth_diagnostic(path)])
    try:
        doc = json.loads(text, object_pairs_hook=hooks.pairs, parse_float=hooks.float_,
                         parse_constant=hooks.constant, parse_int=hooks.int_)
    except RecursionError:  # only when the caller's own stack is nearly exhausted
        raise DecodeError([depth_diagnostic("(top level)")]) from None
    except json.JSONDecodeError as err:
        raise _syntax_error(err) from None
    _raise_if(check_tree(doc))
    return doc


def _syntax_error(err: json.JSONDecodeError) -> DecodeError:
    return DecodeError([Diagnostic(
        "E0002", f"malformed JSON: {err.msg} (line {err.lineno}, column {err.colno})",
        "(top level)")])


def _raise_if(diags: list[Diagnostic]) -> None:
    if diags:
        raise DecodeError(diags)


def depth_diagnostic(path: str) -> Diagnostic:
    return Diagnostic("E0009", f"arrays and objects nest deeper than {MAX_DEPTH} levels", path,
                      help="no manifest needs more; this is not a manifest written by a generator")


def check_tree(doc: Any) -> list[Diagnostic]:
    """Every limit violation in a parsed JSON value, with its path: duplicate keys (E0003),
    lone surrogates (E0008), nesting (E0009), unrepresentable numbers (E0010). Iterative:
    any depth is safe to check."""
    out: list[Diagnostic] = []
    stack: list[tuple[Any, str, int]] = [(doc, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        kind = type(value)
        if kind is str:
            if LONE_SURROGATE.search(value):
                out.append(_surrogate_diag(value, path))
        elif kind is int:
            # Compared, never converted to text: str() of a huge int may itself raise.
            if value.bit_length() > 332 and abs(value) >= _INT_LIMIT:
                out.append(Diagnostic("E0010", f"integer with more than {MAX_INT_DIGITS} digits",
                                      path or "(top level)"))
        elif kind is float:
            if not math.isfinite(value):
                out.append(Diagnostic("E0010", f"number {value} is not finite",
                                      path or "(top level)", note=_NONFINITE_NOTE))
        elif kind is _Unrepresentable:
            shown = value.text if len(value.text) <= 40 else value.text[:40] + "..."
            out.append(Diagnostic("E0010", f"number `{shown}` {value.why}", path or "(top level)",
                                  note=value.note))
        elif isinstance(value, (dict, list, tuple)):  # tuples: documents built in code
            if depth > MAX_DEPTH:
                out.append(depth_diagnostic(path or "(top level)"))
                continue
            if isinstance(value, dict):
                for k in getattr(value, "dups", ()):
                    out.append(Diagnostic(
                        "E0003", f"duplicate key `{k}`", paths.key(path, k),
                        note="JSON parsers keep only one of the values; kern refuses to guess "
                             "which"))
                items = []
                for k, v in value.items():
                    p = paths.key(path, k)
                    if LONE_SURROGATE.search(k):
                        out.append(_surrogate_diag(k, p, key=True))
                    items.append((v, p, depth + 1))
                stack.extend(reversed(items))
            else:
                stack.extend((v, paths.index(path, i), depth + 1)
                             for i, v in reversed(list(enumerate(value))))
    return out


def _surrogate_diag(text: str, path: str, key: bool = False) -> Diagnostic:
    lone = LONE_SURROGATE.search(text).group()  # type: ignore[union-attr]
    return Diagnostic(
        "E0008", f"{'key' if key else 'string'} holds a lone surrogate U+{ord(lone):04X}, "
        "which is not Unicode text", path or "(top level)",
        help="a \\uD800-\\uDFFF escape is only valid as half of a surrogate pair")


def _too_deep(text: str) -> str | None:
    """The path of the first value nested deeper than MAX_DEPTH, or None. A tolerant,
    iterative scan (the text need not be valid JSON; syntax is the parser's to report)."""
    # One frame per open container: [is_object, key or index, expecting_key].
    stack: list[list] = []
    for m in _TOKEN.finditer(text):
        tok = m.group()
        c = tok[0]
        if c == '"':
            if stack and stack[-1][0] and stack[-1][2]:
                try:
                    stack[-1][1] = json.loads(tok)
                except ValueError:
                    stack[-1][1] = tok.strip('"')
                stack[-1][2] = False
        elif c in "[{":
            stack.append([c == "{", 0, c == "{"])
            if len(stack) > MAX_DEPTH:
                return _stack_path(stack[:-1])
        elif c in "]}":
            if stack:
                stack.pop()
        elif c == "," and stack:
            if stack[-1][0]:
                stack[-1][2] = True
            else:
                stack[-1][1] += 1
    return None


def _stack_path(frames: list[list]) -> str:
    path = ""
    for is_obj, where, _ in frames:
        path = paths.key(path, str(where)) if is_obj else paths.index(path, where)
    return path
