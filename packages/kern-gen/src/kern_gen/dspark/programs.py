"""The DSpark manifest's programs, in manifest order (docs/dspark.md): the plain target
programs, ``decode_spec`` (decode + taps), taps added to ``prefill`` and ``verify``, and the
draft's two programs; ``verify`` ends with the in-graph acceptance step."""

from __future__ import annotations

from ..llama import merge as M
from ..llama import programs as P
from ..llama.ir import Program
from ..llama.wiring import Inputs
from . import draft as D
from .spec import DraftSpec
from .taps import add_taps

ORDER = ("prefill", "decode", "decode_spec", "verify", "batch", "draft", "draft_precompute",
         "draft_precompute_prefill")


def build(g: Inputs, spec: DraftSpec) -> list[Program]:
    cfg = g.cfg
    plain = {name: M.merge_projections(make(g), cfg) for name, make in P.PROGRAMS.items()}
    out = {
        "prefill": add_taps(plain["prefill"], spec, cfg),
        "decode": plain["decode"],
        "decode_spec": add_taps(M.merge_projections(P.decode(g, "decode_spec"), cfg), spec,
                                cfg),
        "verify": D.accepting(add_taps(plain["verify"], spec, cfg), spec),
        "batch": plain["batch"],
        "draft": D.draft(g, spec),
        "draft_precompute": D.precompute(g, spec),
        "draft_precompute_prefill": D.precompute(g, spec, "draft_precompute_prefill"),
    }
    return [out[name] for name in ORDER]
