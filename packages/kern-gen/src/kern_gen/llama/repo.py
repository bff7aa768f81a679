"""Where the repository's files are, wherever the tool is run from.

The generator reads files of the kern checkout it belongs to: the own kernels' sources
(``packages/kern-gen/kernels/``) and the presets' captures, configs and example directories
(``command.PRESETS``, paths relative to the checkout's root).  :func:`root` finds the checkout
from this package's location (the uv workspace installs it editable) or else from the current
directory upwards; :func:`find` refuses with one line (a :class:`WiringError`) when there is
no checkout or the file is missing.
"""

from __future__ import annotations

from pathlib import Path

from .errors import WiringError

KERNELS = Path("packages/kern-gen/kernels")
"""The own kernels' sources and their ``build.py``, relative to the checkout's root."""

MARKER = KERNELS / "build.py"
"""A file only a kern checkout has: its directory tree is the root."""


def root() -> Path | None:
    """The kern checkout's root: above this module, else the current directory or above."""
    here, cwd = Path(__file__).resolve(), Path.cwd().resolve()
    for d in (*here.parents, cwd, *cwd.parents):
        if (d / MARKER).is_file():
            return d
    return None


def find(rel: str | Path, what: str, must_exist: bool = True) -> Path:
    """The checkout's file ``rel`` (``what`` names it in the refusal)."""
    r = root()
    if r is None:
        raise WiringError(f"{what} `{rel}`: no kern checkout found (above the kern-gen package "
                          f"or the current directory {Path.cwd()}); pass the path explicitly")
    p = r / rel
    if must_exist and not p.exists():
        raise WiringError(f"{what} `{rel}` is missing from the kern checkout at {r}")
    return p


def given(path: Path, what: str) -> Path:
    """A path the user gave: it must exist."""
    if not path.exists():
        raise WiringError(f"{what} `{path}` does not exist")
    return path
