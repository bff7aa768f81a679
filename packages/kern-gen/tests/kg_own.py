"""Shared by kern-gen's generator tests."""

from __future__ import annotations

from pathlib import Path


def own_committed(example: Path) -> dict[str, bytes]:
    """The own kernels' cubins committed with an example (every ``kernels/*.cubin`` whose name
    is not a mined module's 16 hex digits), for generating without nvcc."""
    import re
    return {p.name: p.read_bytes() for p in sorted((example / "kernels").glob("*.cubin"))
            if not re.fullmatch(r"[0-9a-f]{16}\.cubin", p.name)}
