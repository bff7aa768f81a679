"""Fed decode steps through mailboxes: each one-token decode whose input token is the
previous step's ``next_token`` runs as ONE sequence graph (:meth:`Runtime.run_sequence
<kern_runtime.Runtime.run_sequence>`), with nothing queued between two steps' graphs but
an event.

The sequence: the runtime's copy kernel takes ``token_ids`` from ``next_token`` and the
step's positions (``positions``, ``slots``, ``kv_lens``: the host's values) from a
:class:`~kern_runtime.Mailbox`; the decode; the copy kernel puts ``next_token`` into the
mailbox. The host reads the token there after the mailbox's event.

Why: on an H100 (session 32, ``packages/kern-run/device_feed.py``, docs/measurements.md)
the stream operations' feed (a token copy, the positions, a read back with its event, each
its own stream operation between the graphs) adds ~17 µs a step to the replayed graph.

Status: the default of :func:`~kern_run.generate.generate` since session 33. Measured there
on an H100 (``device_feed.py``): +3.4 µs a step over the bare replay against +17.5 µs for
the stream operations, logits bit-identical step by step; ``kern-run bench`` SmolLM2 (random
weights of its shape) 0.426 vs 0.440 ms/token, tokens identical. ``generate(mailboxes=False)``
is the old way (the bench's A/B row). The n-gram speculative loop's plain steps
(:func:`~kern_run.spec.spec_generate`) and, since session 34, the DSpark loop's plain tail
take the same feed; the serving engine's batched steps still queue stream operations.

Mailbox layout (32 bytes): ``positions`` i64 at 0, ``slots`` i64 at 8, ``kv_lens`` i32 at
16, ``next_token`` i64 at 24 (what the decode stored). Two mailboxes are used in turn: the
generation loop keeps one step queued ahead of the token it waits for, so a mailbox is
written again only after its previous step's token was read (:meth:`MailboxFeed.queue`
waits for it otherwise)."""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
from kern_manifest.contract import (DECODE, KV_LENS, NEXT_TOKEN, POSITIONS, SLOTS, SYMBOL,
                                    TOKEN_IDS)

from .inputs import check_pos0

ONE = {SYMBOL: 1}
#: Byte offsets in a mailbox.
AT_POSITION, AT_SLOT, AT_KV_LEN, AT_TOKEN, BOX_BYTES = 0, 8, 16, 24, 32
#: Mailboxes in turn: steps in flight + 1.
BOXES = 2


def queue_fed_step(rt: Any, feed: "MailboxFeed | None", inputs: Any, call: Any) -> Any:
    """Queue the fed decode ``call`` (a :class:`~kern_run.chunks.Call` of one token, its input
    the last queued step's ``next_token``): through ``feed``'s mailboxes, else by stream
    operations (``inputs.write_fed``, the run, a read). Returns its token's pending read."""
    if feed is not None:
        return feed.queue(call.pos0, graph=call.graph)
    inputs.write_fed(rt, call.pos0)
    rt.run(call.program, call.symbols, graph=call.graph)
    return rt.read_async(NEXT_TOKEN, ONE)


def feed_for(rt: Any, mailboxes: bool) -> "MailboxFeed | None":
    """The feed of a generation loop's fed steps: the runtime's :class:`MailboxFeed` when
    ``mailboxes`` and the runtime has them (``rt.mailbox``), else None (stream operations)."""
    return MailboxFeed.of(rt) if mailboxes and hasattr(rt, "mailbox") else None


class MailboxFeed:
    """The fed steps of one runtime (``rt.mailbox`` and ``rt.run_sequence``). One per runtime
    (:meth:`of`): its mailboxes and sequence graphs live as long as the runtime, so that
    generations after the first capture nothing and allocate nothing."""

    @classmethod
    def of(cls, rt: Any) -> "MailboxFeed":
        """The runtime's feed, made on first use."""
        feed = _FEEDS.get(rt)
        if feed is None:
            feed = _FEEDS[rt] = cls(rt)
        return feed

    def __init__(self, rt: Any) -> None:
        from kern_runtime import Copy, Load, Run, Store
        # a proxy: _FEEDS' values must not keep their runtime (its key) alive
        self.rt = weakref.proxy(rt)
        self.boxes = [rt.mailbox(BOX_BYTES) for _ in range(BOXES)]
        self.ops = [(Copy.of(TOKEN_IDS, NEXT_TOKEN, ONE),
                     Load.of(POSITIONS, b, AT_POSITION, ONE), Load.of(SLOTS, b, AT_SLOT, ONE),
                     Load.of(KV_LENS, b, AT_KV_LEN, ONE), Run.of(DECODE, ONE),
                     Store.of(b, NEXT_TOKEN, AT_TOKEN, ONE)) for b in self.boxes]
        # per box, made once: (position and slot i64 [2], kv_len i32 [1], next_token i64 [1])
        self._views = [(b.view(np.int64, AT_POSITION, 2), b.view(np.int32, AT_KV_LEN),
                        b.view(np.int64, AT_TOKEN)) for b in self.boxes]
        self._reads: list[BoxRead | None] = [None] * BOXES
        self._turn = 0

    def capture(self) -> None:
        """Capture both sequences' graphs (before a clock starts)."""
        for ops in self.ops:
            self.rt.capture_sequence(ops, copy_kernel=True)

    def queue(self, pos0: int, graph: bool = True) -> "BoxRead":
        """Queue the fed decode at ``pos0``; returns its token's pending read."""
        check_pos0(pos0)
        i = self._turn
        self._turn = (i + 1) % BOXES
        if (prev := self._reads[i]) is not None:
            prev.wait()                   # its token is read out before the box is reused
        box, (pos_slot, kv_len, token) = self.boxes[i], self._views[i]
        pos_slot[:] = pos0
        kv_len[0] = pos0 + 1
        self.rt.run_sequence(self.ops[i], graph=graph, copy_kernel=True)
        box.mark()
        read = self._reads[i] = BoxRead(box, token)
        return read


_FEEDS: "weakref.WeakKeyDictionary[Any, MailboxFeed]" = weakref.WeakKeyDictionary()


class BoxRead:
    """A fed step's token: :meth:`wait` waits for its mailbox's event, then copies it out
    (once; later calls return the same array)."""

    def __init__(self, box: Any, token: np.ndarray) -> None:
        self._box: Any = box
        self._token = token               # the box's next_token view
        self._out: np.ndarray | None = None

    def wait(self) -> np.ndarray:
        if self._out is None:
            self._box.wait()
            self._out = self._token.copy()
            self._box = self._token = None
        return self._out
