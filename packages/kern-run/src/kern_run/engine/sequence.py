"""One sequence in the engine: its request, its pages and block-table row, how far its prompt
is prefilled, the decode rows queued for it and the tokens read back.

Positions (= KV keys) of a prompt of n tokens: 0…n−2 are written by ``prefill`` chunks,
n−1 by the sequence's first decode row (which yields the first generated token), n−1+i by
its (i+1)-th decode row, fed the i-th generated token. With max_tokens m the last decode row
is at n+m−2, so the sequence writes n+m−1 slots: :func:`reserve_tokens`. Position p lives
in slot ``pages[p // 16] * 16 + p % 16``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from kern_manifest.contract import PAGE_TOKENS

from .api import FINISH_LENGTH, FINISH_STOP, Request, TokenEvent

#: Sequence states.
WAITING = "waiting"       # submitted, no pages yet
RUNNING = "running"       # pages held; prefilling (prefilled < n − 1) or decoding
FINISHED = "finished"     # ended (finish set); pages freed


def reserve_tokens(prompt_len: int, max_tokens: int) -> int:
    """KV slots a sequence writes at most: its prompt and one per decode row but the last
    generated token (never fed). A row is never queued past max_tokens, so an EOS seen one
    step late wastes a row inside this reservation."""
    return prompt_len + max_tokens - 1


@dataclass(eq=False)
class Sequence:
    req: Request
    order: int                                # submission order (FIFO admission)
    state: str = WAITING
    pages: list[int] = field(default_factory=list)
    table: np.ndarray | None = None           # i32 [P]: pages, then zeros (the pad page)
    prefilled: int = 0                        # prompt tokens whose KV a prefill wrote
    queued: int = 0                           # decode rows queued (each makes one token)
    produced: int = 0                         # tokens read back, a stop token included
    tokens: list[int] = field(default_factory=list)   # delivered tokens
    finish: str | None = None
    stop_token: int | None = None

    @property
    def id(self) -> str:
        return self.req.id

    @property
    def n(self) -> int:
        return len(self.req.prompt)

    @property
    def prefill_done(self) -> bool:
        return self.prefilled >= self.n - 1

    @property
    def next_pos(self) -> int:
        """Position of the next decode row."""
        return self.n - 1 + self.queued

    @property
    def wants_row(self) -> bool:
        """Running, prefilled, and a decode row left before max_tokens."""
        return self.state == RUNNING and self.prefill_done and self.queued < self.req.max_tokens

    @property
    def written(self) -> int:
        """KV slots written or queued for writing."""
        return self.prefilled + self.queued

    def assign(self, pages: list[int], width: int) -> None:
        self.pages = pages
        self.table = np.zeros(width, dtype=np.int32)
        self.table[:len(pages)] = pages
        self.state = RUNNING

    def slot(self, pos: int) -> int:
        return self.pages[pos // PAGE_TOKENS] * PAGE_TOKENS + pos % PAGE_TOKENS

    def slots(self, pos0: int, count: int) -> np.ndarray:
        """i64 [count]: the slots of positions pos0 … pos0 + count − 1."""
        pos = np.arange(pos0, pos0 + count, dtype=np.int64)
        pages = np.asarray(self.pages, dtype=np.int64)[pos // PAGE_TOKENS]
        return pages * PAGE_TOKENS + pos % PAGE_TOKENS

    def feed_token(self) -> int:
        """The token id of the next decode row, from the host: the last prompt token, then
        the last token read back (only valid once every queued row was read)."""
        if self.queued == 0:
            return self.req.prompt[-1]
        return self.tokens[-1]

    def take(self, token: int, eos: frozenset[int]) -> TokenEvent | None:
        """Token ``token`` read back for this sequence's next row: deliver it, or end the
        sequence (state left to the caller, who frees the pages). None: nothing to say
        (already finished, e.g. a row wasted after a stop)."""
        if self.finish is not None:
            return None
        self.produced += 1
        req = self.req
        if token in req.stop_token_ids or (not req.ignore_eos and token in eos):
            self.finish, self.stop_token = FINISH_STOP, token
            return TokenEvent(req.id, None, FINISH_STOP, token)
        self.tokens.append(token)
        if self.produced >= req.max_tokens:
            self.finish = FINISH_LENGTH
            return TokenEvent(req.id, token, FINISH_LENGTH)
        return TokenEvent(req.id, token)
