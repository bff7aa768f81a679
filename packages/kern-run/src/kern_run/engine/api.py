"""The engine's public types: what a caller (e.g. kern-serve) submits, receives and configures.

Units: every length is in tokens; a page is :data:`PAGE_TOKENS` (16) KV token slots; page 0
of the pool is the pad page, never given to a sequence."""

from __future__ import annotations

from dataclasses import dataclass, field

from kern_manifest.contract import PAGE_TOKENS

from ..errors import KernRunError

#: Why a sequence ended (``TokenEvent.finish``).
FINISH_STOP = "stop"        # EOS (unless ignore_eos) or a stop id: that token is not delivered
FINISH_LENGTH = "length"    # max_tokens generated
FINISH_ABORT = "abort"      # Engine.abort
FINISH_ERROR = "error"      # the runtime failed during a step (Engine.error holds why)

#: ``Refused.code`` values.
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"  # beyond the model: position limit, table
POOL_TOO_SMALL = "pool_too_small"                    # fits the model, never fits the KV pool
INVALID_PROMPT = "invalid_prompt"                    # empty, or a token id outside the vocab
INVALID_REQUEST = "invalid_request"                  # a bad field other than the prompt
DUPLICATE_ID = "duplicate_id"                        # an id still live in the engine
REFUSAL_CODES = (CONTEXT_LENGTH_EXCEEDED, POOL_TOO_SMALL, INVALID_PROMPT, INVALID_REQUEST,
                 DUPLICATE_ID)


@dataclass(frozen=True)
class Request:
    id: str
    prompt: tuple[int, ...]          # token ids, len >= 1
    max_tokens: int                  # >= 1: tokens to generate at most
    stop_token_ids: frozenset[int] = frozenset()
    ignore_eos: bool = False


@dataclass(frozen=True)
class TokenEvent:
    """One thing a step learned about request ``id``: a token to deliver, its end, or both
    (the last token of a "length" finish comes with ``finish="length"``)."""

    id: str
    token: int | None                # a generated token (never an EOS/stop id); None: bare finish
    finish: str | None = None        # None while running; see FINISH_*
    stop_token: int | None = None    # the EOS/stop id that ended it ("stop" only)


class Refused(KernRunError):
    """``Engine.submit`` refused a request: ``code`` (one of :data:`REFUSAL_CODES`) and
    ``param`` (the request field at fault: "prompt", "max_tokens", "id") for an API error."""

    def __init__(self, code: str, param: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.param = param


@dataclass(frozen=True)
class EngineConfig:
    capacity: int                    # KV token slots of the pool (multiple of 16); page 0 = pad
    max_seqs: int = 64               # sequences admitted at once = rows of the largest bucket
    chunk: int = 512                 # prefill chunk (clamped to max_tokens)
    max_prefill_tokens: int = 2048   # prompt tokens prefilled per engine step (budget)
    eos: frozenset[int] = frozenset()
    vocab: int | None = None         # token ids must lie in [0, vocab) (None: not checked)
    max_tokens: int = 2048           # the manifest's tokens.max (largest run)
    table_pages: int = 0             # P, block_table's 2nd dim; 0: capacity // 16 (any sequence)
    position_limit: int | None = None
    graphs: bool = True              # CUDA graphs: one per bucket, one per full prefill chunk
    buckets: tuple[int, ...] | None = None   # None: default_buckets(max_seqs)

    @property
    def pages(self) -> int:
        """Pages of the pool, the pad page included."""
        return self.capacity // PAGE_TOKENS

    @property
    def table_width(self) -> int:
        return self.table_pages or self.pages


def default_buckets(max_seqs: int, max_tokens: int | None = None) -> tuple[int, ...]:
    """1, 2, 4, 8, then 16, 24, 32, 48, 64, 96, 128, 192, … (2^k and 1.5 x 2^k), up to
    ``max_seqs``, which is always the last bucket; none above ``max_tokens``."""
    top = max_seqs if max_tokens is None else min(max_seqs, max_tokens)
    out = [b for b in (1, 2, 4, 8) if b <= top]
    k = 16
    while k <= top:
        out.append(k)
        if k * 3 // 2 <= top:
            out.append(k * 3 // 2)
        k *= 2
    if not out or out[-1] != top:
        out.append(top)
    return tuple(out)


@dataclass
class EngineStats:
    running: int = 0                 # sequences admitted (prefilling or decoding)
    waiting: int = 0                 # sequences queued for pages / a row
    pages_total: int = 0             # pages a sequence may get (the pad page excluded)
    pages_reserved: int = 0          # pages held by admitted sequences
    pages_used: int = 0              # of those, pages holding some written KV
    steps: int = 0                   # Engine.step calls that did device work
    decode_steps: int = 0
    prefill_chunks: int = 0
    step_ms: dict[int, float] = field(default_factory=dict)   # bucket -> median ms per step
    step_counts: dict[int, int] = field(default_factory=dict)  # bucket -> decode steps
    host_ms_per_step: float = 0.0    # host time per step() (waits on the device excluded)
    capture_ms: float = 0.0          # graph captures so far
    drains: int = 0                  # decode steps whose inputs were rewritten from the host
