"""kern-mine: from a CUPTI capture (capture/FORMAT.md) to passes, the self-verifying token
reference, pointer classes and fitted launch expressions — with no model knowledge.

Public API::

    mine(capture_or_path, Options(...)) -> Mined      # the whole front end (mine.py)
    render_report(mined) -> str                       # the human report (report.py)
    encode_json(mined) -> bytes                       # the versioned JSON (MINED.md)
    fit_series(tokens, values) -> Fit                 # one series vs the closed set (fit.py)
"""

from __future__ import annotations

import msgspec

from .capture_format import CaptureFormatError, read_capture
from .fit import TOKENS, Fit, fit_series
from .launches import Identity, identity_label, select_launches
from .mine import MineError, mine
from .passes import cut_passes
from .report import render_report
from .results import (MINED_FORMAT, MINED_VERSION, Candidate, FamilyInfo, GroupInfo, Mined, Options,
                      PassInfo, PointerInfo, Reference, RequestInfo, SeriesFit, SiteInfo)

__all__ = [
    "MINED_FORMAT", "MINED_VERSION", "TOKENS", "Candidate", "CaptureFormatError", "FamilyInfo", "Fit",
    "GroupInfo", "Identity", "MineError", "Mined", "Options", "PassInfo", "PointerInfo", "Reference",
    "RequestInfo", "SeriesFit", "SiteInfo", "cut_passes", "decode_json", "encode_json", "fit_series",
    "identity_label", "mine", "read_capture", "render_report", "select_launches",
]


def encode_json(mined: Mined) -> bytes:
    """The versioned JSON document of a result (MINED.md), pretty-printed, newline-terminated."""
    return msgspec.json.format(msgspec.json.encode(mined), indent=1) + b"\n"


def decode_json(data: bytes | str) -> Mined:
    """Reads a document written by :func:`encode_json` back into structs."""
    return msgspec.json.decode(data, type=Mined)
