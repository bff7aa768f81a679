"""Every CUDA graph a DSpark run may replay, captured before its clock starts."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kern_manifest.contract import DECODE_SPEC, DRAFT, DRAFT_PRECOMPUTE, PREFILL, VERIFY

from ..chunks import Call, graph_keys
from ..generate import RuntimeLike

if TYPE_CHECKING:
    from ..fed import MailboxFeed
    from .dspark_pipeline import FedRound


def capture_dspark(rt: RuntimeLike, calls: Sequence[Call], block: int, widths: list[int],
                   steps: int, chunk_precompute: str = DRAFT_PRECOMPUTE,
                   fed: "FedRound | None" = None, feed: "MailboxFeed | None" = None) -> float:
    """Capture every graph the run may replay, before the clock: the prompt's full prefill
    chunks and their precompute (program ``chunk_precompute``), ``decode_spec`` and its one-row precompute, plain ``decode``
    (the finishing steps), and when rounds can happen (``widths``) ``draft`` (tokens = B),
    each ``verify`` width and each precompute width 1 … max width; ``fed``: the one graph of a
    pipelined round fed on the device (:func:`.dspark_pipeline.fed_round`); ``feed``: the
    plain tail's fed-step sequences (:mod:`kern_run.fed`). Returns the seconds."""
    t0 = time.perf_counter()
    keys = []
    for program, tokens in graph_keys([c for c in calls if c.program == PREFILL]):
        keys += [(program, tokens), (chunk_precompute, tokens)]
    keys += [(DECODE_SPEC, 1), (DRAFT_PRECOMPUTE, 1)]
    if steps > 1:
        keys.append(("decode", 1))
    if widths:
        keys.append((DRAFT, block))
        keys += [(VERIFY, w) for w in widths]
        keys += [(DRAFT_PRECOMPUTE, w) for w in range(1, widths[-1] + 1)]
    seen: set = set()
    for key in keys:
        if key not in seen:
            seen.add(key)
            rt.capture(key[0], {"tokens": key[1]})
    if fed is not None:
        rt.capture_sequence(fed.ops, copy_kernel=fed.copy_kernel)
    if feed is not None:
        feed.capture()
    return time.perf_counter() - t0
