"""The mined facts: the structures ``mine()`` returns and ``--json`` writes (MINED.md).

Versioned by ``MINED_VERSION``: any change of meaning or removal of a field bumps it; adding
a field does not (consumers ignore keys they do not know).  Expressions are kern-manifest
``Expr`` values (a constant or ``{"sym"}``/``{"ceil_div"}``/``{"mul"}`` nodes over the
symbol ``tokens``), so generators can copy them into manifests unchanged.
"""

from __future__ import annotations

from typing import Literal

import msgspec
from kern_manifest import Expr

from .fit import Verdict

__all__ = [
    "MINED_FORMAT", "MINED_VERSION", "Candidate", "FamilyInfo", "GroupInfo", "Mined", "Options",
    "PassInfo", "PointerInfo", "Reference", "RequestInfo", "SeriesFit", "SiteInfo",
]

MINED_FORMAT = "kern-mined"
MINED_VERSION = 2


class _S(msgspec.Struct, kw_only=True):
    pass


class Options(_S, kw_only=True):
    gap_ms: float = 5.0
    min_repeats: int = 8
    min_match: float = 0.9
    min_distinct: int = 3
    request: int | None = None


class RequestInfo(_S, kw_only=True):
    index: int
    launches: int
    t0_ns: int
    t1_ns: int
    forwards: list[int]


class PassInfo(_S, kw_only=True):
    index: int
    request: int
    family: int
    group: int | None
    """None: irregular, or outside ``--request``."""
    regular: bool
    launches: int
    first_seq: int
    last_seq: int
    t0_ns: int
    t1_ns: int
    tokens: int | None
    """The token count under the group's chosen reference (None: no reference / no group)."""
    extra: int = 0
    missing: int = 0


class FamilyInfo(_S, kw_only=True):
    index: int
    anchor: str
    """Label of the once-per-forward kernel whose occurrences end forwards."""
    anchor_name: str | None
    anchor_module: str | None
    tail: int
    """Launches from an anchor occurrence to the last launch of its forward."""
    start: str | None
    """Label of the kernel that begins a forward (None: a forward begins right after the previous one)."""
    between: int
    """Launches between this family's forwards that belong to none (e.g. cache resets)."""
    forwards: list[int]
    irregular: list[int]


class Candidate(_S, kw_only=True):
    site: int
    kernel: str
    tokens: list[int]
    """grid.x per forward of the group: the token counts this candidate proposes."""
    unfittable: int
    underdetermined: int
    complexity: int
    """Sum of the classes of every non-constant fit, an unfittable one counting 5 (tie-break:
    simpler is better)."""
    chosen: bool = False


class Reference(_S, kw_only=True):
    site: int | None
    kernel: str | None
    reason: str
    candidates: list[Candidate]


class SeriesFit(_S, kw_only=True):
    what: str
    """``grid.x|y|z``, ``smem`` or ``param[i]``."""
    verdict: Verdict
    expr: Expr | None = None
    text: str = ""
    cls: int = -1
    alternatives: str = ""
    reason: str = ""
    samples: list[tuple[int, int]] = []
    """Distinct (tokens, value) pairs that decided the verdict."""


class PointerInfo(_S, kw_only=True):
    param: int
    at: int
    klass: Literal["stable", "changing", "mixed"]
    """stable: same (range_start, offset) in every forward (weight or persistent state);
    changing: differs between forwards (activation workspace); mixed: not a device address
    in some forwards."""
    range_start: int | None
    range_size: int | None
    offset: int | None
    distinct: int
    """Distinct (range_start, offset) values seen."""
    forwards: int
    distinct_tokens: int
    """Distinct token counts over which it was seen (stable across >1 is the strong claim)."""


class SiteInfo(_S, kw_only=True):
    index: int
    kernel: str
    name: str | None
    module: str | None
    occurrence: int
    present: int
    """Forwards of the group that have this site."""
    kernels: list[str] = []
    """Every kernel seen at this site when more than one (a library call whose kernel the library
    picks per shape, e.g. cuBLAS); empty otherwise."""
    replay: Literal["flat", "extra", "aggregate", "unreadable"]
    blob_params: int
    params: int | None
    block: tuple[int, int, int]
    example_seq: int
    fits: list[SeriesFit]
    pointers: list[PointerInfo]


class GroupInfo(_S, kw_only=True):
    index: int
    family: int
    forwards: list[int]
    tokens: list[int | None]
    reference: Reference
    sites: list[SiteInfo]
    verdicts: dict[str, int]
    """Counts of each verdict over every series of every site."""
    replay: dict[str, int]
    """Counts of sites by replayability."""


class Mined(_S, kw_only=True):
    format: str = MINED_FORMAT
    version: int = MINED_VERSION
    capture: str
    options: Options
    launches: int
    not_executed: int
    dummy: int
    kept: int
    unassigned: int
    requests: list[RequestInfo]
    passes: list[PassInfo]
    families: list[FamilyInfo]
    groups: list[GroupInfo]
    warnings: list[str] = []
    """Defects of the capture that did not stop mining, each naming the file and line (a
    partial last line, dropped: the capturing process was cut short)."""
