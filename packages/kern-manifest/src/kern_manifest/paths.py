"""JSON paths in the style diagnostics print them: ``programs.decode.dispatches[12].args[3]``.

Map keys that are plain identifiers are joined with a dot; any other key (weight names
contain dots) is quoted: ``buffers["model.norm.weight"].shape[0]``.
"""

from __future__ import annotations

import json
import re

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def key(path: str, name: str) -> str:
    """``path`` extended by the map key ``name``."""
    if _IDENT.match(name):
        return f"{path}.{name}" if path else name
    return f"{path}[{json.dumps(name)}]"


def index(path: str, i: int) -> str:
    return f"{path}[{i}]"
