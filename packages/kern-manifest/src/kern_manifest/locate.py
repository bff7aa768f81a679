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

_WS = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_SCALAR = re.compile(r"-?[0-9][0-9.eE+-]*|true|false|null")


def locate(text: str) -> dict[str, tuple[int, int]]:
    """Path -> (1-based line, 1-based column) of every value in ``text``.

    For a key that occurs twice in one object the later occurrence wins, which is where a
    duplicate-key diagnostic should point.
    """
    starts: dict[str, int] = {}
    _value(text, _WS.match(text, 0).end(), "", starts)
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    out = {}
    for path, pos in starts.items():
        line = bisect.bisect_right(line_starts, pos)
        out[path] = (line, pos - line_starts[line - 1] + 1)
    return out


def _value(text: str, pos: int, path: str, starts: dict[str, int]) -> int:
    starts[path] = pos
    c = text[pos]
    if c == "{":
        pos = _WS.match(text, pos + 1).end()
        if text[pos] == "}":
            return pos + 1
        while True:
            m = _STRING.match(text, pos)
            name = json.loads(m.group())
            pos = _WS.match(text, m.end()).end() + 1  # past ':'
            pos = _WS.match(text, pos).end()
            pos = _WS.match(text, _value(text, pos, paths.key(path, name), starts)).end()
            if text[pos] == "}":
                return pos + 1
            pos = _WS.match(text, pos + 1).end()  # past ','
    if c == "[":
        pos = _WS.match(text, pos + 1).end()
        if text[pos] == "]":
            return pos + 1
        i = 0
        while True:
            pos = _WS.match(text, _value(text, pos, paths.index(path, i), starts)).end()
            if text[pos] == "]":
                return pos + 1
            pos = _WS.match(text, pos + 1).end()
            i += 1
    m = (_STRING if c == '"' else _SCALAR).match(text, pos)
    return m.end()
