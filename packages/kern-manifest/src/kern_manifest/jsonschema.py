"""JSON Schema of the manifest format, generated from the msgspec structs."""

from __future__ import annotations

from typing import Any

import msgspec

from .dtypes import _PARAM_RE
from .schema import Manifest


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of manifest v2. Parameter type strings carry their
    grammar as a pattern; rules that need the whole manifest are the verifier's."""
    schema = msgspec.json.schema(Manifest)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "kern manifest, format version 2"
    defs = schema.get("$defs", {})
    pattern = _PARAM_RE.pattern.replace("(?P<scalar>", "(").replace("(?P<dir>", "(") \
        .replace("(?P<ptr>", "(").replace("(?P<dtype>[a-z0-9]+)", "(bf16|f16|f32|fp8e4m3|i32|u32|i64|u8)")
    for name in ("Kernel", "Step"):
        if name in defs:
            defs[name]["properties"]["params"]["items"] = {"type": "string", "pattern": pattern}
    return schema
