"""Map diagnostic JSON paths back to line and column in the manifest text.

A small scanner over already-valid JSON that records where each value starts, keyed by the
same path strings diagnostics use. Only run when there is something to report, so its cost
(pure Python, ~linear in the text) is off the verification path.
"""

from __future__ import annotations

import bisect
import json
import re

from . import paths
from .bounded import MAX_DEPTH

_WS = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
# NaN and Infinity are not JSON, but Python's parser reads them and E0010 points at them.
_SCALAR = re.compile(r"-?(?:[0-9][0-9.eE+-]*|Infinity)|NaN|true|false|null")


def locate(text: str, max_depth: int = MAX_DEPTH + 1) -> dict[str, tuple[int, int]]:
    """Path -> (1-based line, 1-based column) of every value in ``text`` nested at most
    ``max_depth`` levels (deeper values are skipped: the reader refuses them at the first
    level past its limit, which is still recorded).

    For a key that occurs twice in one object the later occurrence wins, which is where a
    duplicate-key diagnostic should point. Iterative, so any nesting is safe; raises
    ``IndexError``, ``AttributeError`` or ``ValueError`` on text that is not JSON.
    """
    starts = _starts(text, max_depth)
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    out = {}
    for path, pos in starts.items():
        line = bisect.bisect_right(line_starts, pos)
        out[path] = (line, pos - line_starts[line - 1] + 1)
    return out


def _starts(text: str, max_depth: int) -> dict[str, int]:
    starts: dict[str, int] = {}
    # One frame per open container: (is_object, its path, index of the next element).
    stack: list[list] = []
    pos = _WS.match(text, 0).end()
    path: str | None = ""
    while True:
        # ``pos`` is at the start of a value whose path is ``path`` (None: too deep to record;
        # building paths there would cost quadratic time in the depth).
        if path is not None:
            starts[path] = pos
        c = text[pos]
        if c in "{[":
            pos = _WS.match(text, pos + 1).end()
            if text[pos] == ("}" if c == "{" else "]"):
                pos += 1
            else:
                stack.append([c == "{", path if len(stack) + 1 < max_depth else None, 0])
                path, pos = _member(text, pos, stack[-1])
                continue
        else:
            m = (_STRING if c == '"' else _SCALAR).match(text, pos)
            pos = m.end()
        # After a value: close every container that ends here, or move to the next member.
        while True:
            if not stack:
                return starts
            pos = _WS.match(text, pos).end()
            if text[pos] == ",":
                pos = _WS.match(text, pos + 1).end()
                stack[-1][2] += 1
                path, pos = _member(text, pos, stack[-1])
                break
            if text[pos] not in "}]":
                raise ValueError(f"unexpected {text[pos]!r} at {pos}")
            pos += 1
            stack.pop()


def _member(text: str, pos: int, frame: list) -> tuple[str | None, int]:
    """The path of the next member of the container ``frame`` (None under an unrecorded
    container) and where its value starts."""
    is_obj, base, i = frame
    if not is_obj:
        return (None if base is None else paths.index(base, i)), pos
    m = _STRING.match(text, pos)
    pos = _WS.match(text, m.end()).end() + 1  # past ':'
    return (None if base is None else paths.key(base, json.loads(m.group()))), \
        _WS.match(text, pos).end()
