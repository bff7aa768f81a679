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
MINED_VERSION = 1


class _S(msgspec.Struct, kw_only=True):
    pass


class Options(_S, kw_only=True):
    gap_ms: float = 5.0
    burst_jump: float = 4.0
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
    core_count: int
    tokens: int | None
    """The token count under the group's chosen reference (None: no reference / no group)."""
    extra: int = 0
    missing: int = 0


class FamilyInfo(_S, kw_only=True):
    index: int
    core: str
    core_name: str | None
    core_module: str | None
    core_per_forward: int
    burst_gap_ns: int | None
    head: int
    tail: int
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
    """Sum of the classes of every non-constant fit (tie-break: simpler is better)."""
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
