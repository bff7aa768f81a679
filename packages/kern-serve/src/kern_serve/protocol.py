"""The messages between the API process and the engine process (msgpack, one frame each).

The link is a stream socket (``socket.socketpair``); a frame is a 4-byte big-endian length
and a msgpack-encoded tagged msgspec struct. Everything is small: a submit carries the prompt
ids, a step carries one ``(id, token, finish, stop_token)`` row per event of that engine step.

API -> engine: :class:`EngineSpec` first, then :class:`Submit`, :class:`Abort`, :class:`Stop` (drain nothing more: the API has
already drained; close the engine and exit 0).

Engine -> API: :class:`Ready` once the engine can take requests (or :class:`Failed`, then the
process exits non-zero), then :class:`Steps` and :class:`Refusal` as they happen,
:class:`Snapshot` (gauges for ``/metrics``) at most every :data:`SNAPSHOT_S` seconds while there
is work, and :class:`Failed` if the engine loop dies (the process then exits 1).
"""

from __future__ import annotations

import socket
import struct

import msgspec

SNAPSHOT_S = 0.1
_LEN = struct.Struct(">I")
MAX_FRAME = 1 << 26


class EngineSpec(msgspec.Struct, tag=True, array_like=True):
    """The first frame on the link: what the engine process builds (see ``adapter.build``)."""
    factory: str                  # "module:function" returning an ``adapter.Built``
    manifest: str | None = None   # the model options of kern-run (None: the bundled default)
    kernels: str | None = None
    weights: list[str] = []
    tokenizer: str | None = None
    gpu: int = 0
    capacity: int | None = None   # KV pool size in tokens (None: kern-run's capacity choice)
    max_seqs: int = 64
    chunk: int = 512
    max_prefill_tokens: int = 2048
    graphs: bool = True
    eos: list[int] = []           # the tokenizer's EOS ids (the API process loaded it)
    options: dict[str, str] = {}  # factory-specific settings (--engine-option KEY=VALUE)


class Submit(msgspec.Struct, tag=True, array_like=True):
    id: str
    prompt: list[int]
    max_tokens: int
    stop_token_ids: list[int] = []
    ignore_eos: bool = False


class Abort(msgspec.Struct, tag=True, array_like=True):
    id: str


class Stop(msgspec.Struct, tag=True, array_like=True):
    pass


class Ready(msgspec.Struct, tag=True, array_like=True):
    model: str                    # the model's label (served name unless --served-model-name)
    vocab: int                    # token ids must be below this
    context: int                  # prompt + max_tokens of one sequence may not exceed this
    max_tokens: int               # the most tokens one request may ask for
    pages_total: int
    page_tokens: int              # tokens per KV page
    pool_bytes: int               # bytes of the KV pool
    max_seqs: int
    buckets: list[int]
    capture_s: float              # CUDA graph capture time (0 without graphs)
    pid: int
    gpu_bytes: int = 0            # GPU memory in use after start-up (0: not on a GPU)


class Failed(msgspec.Struct, tag=True, array_like=True):
    message: str
    exit_code: int = 1


class Refusal(msgspec.Struct, tag=True, array_like=True):
    id: str
    code: str                     # Refused.code: context_length_exceeded, pool_too_small, …
    param: str | None
    message: str


#: one engine event: (request id, token or None, finish or None, stop token or None)
Event = tuple[str, "int | None", "str | None", "int | None"]


class Steps(msgspec.Struct, tag=True, array_like=True):
    events: list[tuple[str, int | None, str | None, int | None]]
    step_s: float                 # wall time of the engine step
    bucket: int                   # the batch bucket of its decode rows (0: none)


class Snapshot(msgspec.Struct, tag=True, array_like=True):
    running: int
    waiting: int
    pages_total: int
    pages_reserved: int
    pages_used: int
    steps: int
    gpu_bytes: int = 0
    host_ms_per_step: float = 0.0   # the engine's running average over all steps
    step_ms: dict[int, float] = {}  # bucket -> the engine's median step time


ToEngine = EngineSpec | Submit | Abort | Stop
FromEngine = Ready | Failed | Refusal | Steps | Snapshot

_enc = msgspec.msgpack.Encoder()
_dec_to_engine = msgspec.msgpack.Decoder(ToEngine)
_dec_from_engine = msgspec.msgpack.Decoder(FromEngine)


def frame(msg: msgspec.Struct) -> bytes:
    body = _enc.encode(msg)
    return _LEN.pack(len(body)) + body


def decode_to_engine(body: bytes) -> ToEngine:
    return _dec_to_engine.decode(body)


def decode_from_engine(body: bytes) -> FromEngine:
    return _dec_from_engine.decode(body)


class FrameReader:
    """Frames out of a byte stream fed in arbitrary pieces (the engine's non-blocking reads)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        out = []
        while len(self.buf) >= 4:
            (n,) = _LEN.unpack_from(self.buf)
            if n > MAX_FRAME:
                raise ValueError(f"frame of {n} bytes: the link is corrupt")
            if len(self.buf) < 4 + n:
                break
            out.append(bytes(self.buf[4:4 + n]))
            del self.buf[:4 + n]
        return out


def recv_frame(sock: socket.socket) -> bytes | None:
    """One frame from a blocking socket; None at EOF."""
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    (n,) = _LEN.unpack(head)
    return _recv_exact(sock, n)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        b = sock.recv(n - got)
        if not b:
            return None
        parts.append(b)
        got += len(b)
    return b"".join(parts)
