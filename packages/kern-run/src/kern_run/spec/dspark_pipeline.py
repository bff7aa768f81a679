"""DSpark rounds queued one ahead (docs/dspark.md step 7; the default of
:func:`~kern_run.spec.dspark.dspark_generate` where the manifest's ``verify`` ends with the
in-graph acceptance step, ``kern_manifest.contract.NEXT_INPUTS``).

The chained loop (:mod:`.dspark`) still puts the host between two rounds: the next draft's
inputs (its anchor and positions) follow from the accepted prefix, which the host learns only
by reading the predictions. Verify's last dispatch computes that prefix on the device and
writes the next round's inputs into the ``next.*`` outputs; this loop copies them into the
inputs on the device, stream-ordered behind the round's precompute, so it queues round r + 1
(draft, verify, precompute) before it waits for round r. The host's wake, accept, emission
and launches then overlap the GPU's work instead of sitting between two rounds.

Round r + 1 is queued ahead only when it fits whatever round r accepts: its anchor lies at
p + 1 … p + m + 1, so the draft's slots up to p + m + B must lie below the capacity, and
m + 1 + k + 1 tokens must remain to the step limit (then its k drafts are what
:meth:`~kern_run.spec.dspark._DSparkLoop.room` would give, and it cannot pass the limit).
Otherwise the loop waits and goes on as the chained loop does (shorter verifies near the step
limit, then the plain tail). A round queued ahead of a stop (an EOS or the step limit inside
round r) is computed and dropped: it writes only KV slots past the emitted sequence, below
the capacity; its reads are waited for before the loop returns.

With graphs, a fed round (the copies, ``draft``, the copies, ``verify``, ``draft_precompute``)
is ONE CUDA graph (:func:`fed_round`, ``Runtime.run_sequence``): one launch a round instead
of three graph launches and six stream copies, and no graph boundary between its programs;
the two reads follow it on the stream (the precompute writes neither ``draft_tokens`` nor
``predictions``).

The programs run on the same inputs as in the chained loop, so the tokens are the same bit
for bit (the GPU test ``test_pipelined_rounds_equal_the_chained`` compares them). GPU timing
events need the chained loop (:func:`~kern_run.spec.dspark.dspark_generate` picks it when a
``gpu_timer`` is given); the host-clock split is queue (the next round launched) / wait /
host (accept and emit)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kern_manifest.contract import (DRAFT, DRAFT_PRECOMPUTE, DRAFT_TOKENS, KV_LENS,
                                    NEXT_DRAFT_KV_LENS, NEXT_POSITIONS, NEXT_TOKEN_IDS,
                                    NEXT_VERIFY_KV_LENS, POSITIONS, PREDICTIONS, SLOTS,
                                    TOKEN_IDS, VERIFY)
from kern_runtime import Copy, Run

from ..chunks import Call
from ..errors import KernRunError
from .dspark import _DSparkLoop

#: The draft's inputs from the acceptance outputs (slots = positions: one sequence).
FEED_DRAFT = ((TOKEN_IDS, NEXT_TOKEN_IDS), (POSITIONS, NEXT_POSITIONS), (SLOTS, NEXT_POSITIONS),
              (KV_LENS, NEXT_DRAFT_KV_LENS))
UNKNOWN = -1
"""``Call.pos0`` of a launch whose position the device chose, until the host learns it."""


#: ``dspark_generate``'s ``round_graph`` values: one graph a fed round with its copies as
#: memcpy nodes (the default) / in the runtime's copy kernel; or a graph per program.
ROUND_GRAPHS = ("memcpy", "kernel", "off")


@dataclass(frozen=True)
class FedRound:
    """The one graph of a fed round: its ops and how its copies run."""

    ops: tuple[Copy | Run, ...]
    copy_kernel: bool


def fed_round(block: int, m: int, how: str = "memcpy") -> FedRound | None:
    """A round of m drafts fed by the previous verify's acceptance outputs, as one sequence:
    the draft's inputs copied, ``draft`` (B rows), its drafts into ``token_ids`` rows 1 … m
    and verify's ``kv_lens``, ``verify`` (m + 1 rows), the precompute of all m + 1 rows.
    ``how``: one of :data:`ROUND_GRAPHS` (``"off"``: None)."""
    if how not in ROUND_GRAPHS:
        raise KernRunError(f"round_graph {how!r}: use one of {', '.join(ROUND_GRAPHS)}")
    if how == "off":
        return None
    w = m + 1
    ops = (*(Copy.of(dst, src) for dst, src in FEED_DRAFT), Run.of(DRAFT, {"tokens": block}),
           Copy.of(TOKEN_IDS, DRAFT_TOKENS, {"tokens": m}, dst_row=1),
           Copy.of(KV_LENS, NEXT_VERIFY_KV_LENS), Run.of(VERIFY, {"tokens": w}),
           Run.of(DRAFT_PRECOMPUTE, {"tokens": w}))
    return FedRound(ops, how == "kernel")


@dataclass
class Queued:
    """A round on the stream: its drafts, the reads of its outputs, and the indices of its
    launches in ``res.calls`` (stamped with the round's position once it is known)."""

    m: int
    drafts: Any
    preds: Any
    calls: range


class PipelinedLoop(_DSparkLoop):
    def __init__(self, *args, fed: FedRound | None = None, **kw) -> None:
        super().__init__(*args, **kw)
        self.fed = fed      # fed_round(B, k, …): the fed rounds' one graph (None: one per program)

    def rounds(self) -> None:
        self.inputs.table(self.rt, max(self.block, self.k + 1))
        cur: Queued | None = None
        while True:
            t_q = self.clock()
            if cur is None:
                m = self.room()
                if m < 1:
                    return self.tail()
                cur = self.queue(m, fed=False)
            nxt = self.queue(self.k, fed=True) if self.fits_ahead(cur.m) else None
            t_w = self.clock()
            self.flush()                          # stream the last round's tokens meanwhile
            p = self.n + self.produced - 1
            drafts = cur.drafts.wait().reshape(-1)[:cur.m].tolist()
            preds = cur.preds.wait().reshape(-1).tolist()
            self.stamp(cur, p)
            self.t_last = t_c = self.clock()
            j, stop = self.accept(drafts, preds)
            t_d = self.clock()
            self.stats.split(t_w - t_q, t_c - t_w, t_d - t_c)
            self.stats.round_s += t_d - t_q
            if nxt is not None:
                self.stats.queued_ahead += 1
                if stop:                          # computed, dropped
                    nxt.drafts.wait()
                    nxt.preds.wait()
                    self.stamp(nxt, p + j + 1)
                    self.stats.dropped += 1
            if stop:
                return
            cur = nxt

    def fits_ahead(self, m: int) -> bool:
        """May the next round be queued before this one (m drafts, at the current anchor) is
        read?  (Module docstring.)"""
        p = self.n + self.produced - 1
        if self.capacity is not None and p + m + 1 + self.block > self.capacity:
            return False
        return self.produced + m + 1 + self.k + 1 <= self.steps

    def queue(self, m: int, fed: bool) -> Queued:
        """Queue a round of m drafts: its inputs (``fed``: copied from the last verify's
        acceptance outputs; else written from the host's anchor), draft, verify behind it,
        the reads of both outputs, and the precompute of all m + 1 rows."""
        at = len(self.res.calls)
        if not fed:                               # the chained loop's queueing
            p = self.n + self.produced - 1
            self.queue_draft(p)
            drafts, preds, _ = self.queue_chained(p, m)
            return Queued(m, drafts, preds, range(at, len(self.res.calls)))
        rt, B, w = self.rt, self.block, m + 1
        if self.fed is not None and self.graph and m == self.k:
            rt.run_sequence(self.fed.ops, copy_kernel=self.fed.copy_kernel)
            self.res.calls += [Call(DRAFT, UNKNOWN, B, True), Call(VERIFY, UNKNOWN, w, True),
                               Call(DRAFT_PRECOMPUTE, UNKNOWN, w, True)]
            drafts = rt.read_async(DRAFT_TOKENS, self.syms[B])
            preds = rt.read_async(PREDICTIONS, self.syms[w])
            return Queued(m, drafts, preds, range(at, len(self.res.calls)))
        for dst, src in FEED_DRAFT:
            rt.copy(dst, src)
        self.launch(DRAFT, UNKNOWN, B, self.graph)
        rt.copy(TOKEN_IDS, DRAFT_TOKENS, self.syms[m], dst_row=1)
        rt.copy(KV_LENS, NEXT_VERIFY_KV_LENS)
        self.launch(VERIFY, UNKNOWN, w, self.graph)
        drafts = rt.read_async(DRAFT_TOKENS, self.syms[B])
        preds = rt.read_async(PREDICTIONS, self.syms[w])
        self.precompute(UNKNOWN, w)               # p unknown: every round may be followed
        return Queued(m, drafts, preds, range(at, len(self.res.calls)))

    def stamp(self, q: Queued, p: int) -> None:
        """Record the position the device gave round ``q`` in its launches."""
        calls = self.res.calls
        for i in q.calls:
            if calls[i].pos0 == UNKNOWN:
                calls[i] = replace(calls[i], pos0=p)
