"""The engine process: ``python -m kern_serve.worker FD``, spawned by the API process.

It owns the only CUDA context (the GPU factory's) and runs the engine loop; the API process
talks to it over the socket ``FD`` in :mod:`kern_serve.protocol` frames. Contract:

- the first frame is the :class:`EngineSpec`; the engine is built, then :class:`Ready` is sent
  (or :class:`Failed` with a one-line message, and the process exits with its status);
- between steps every waiting frame is handled: ``Submit`` -> ``engine.submit`` (a refusal goes
  back as :class:`Refusal`), ``Abort`` -> ``engine.abort`` (ids no longer live are ignored: the
  request may have finished in the step the abort crossed), ``Stop`` -> close and exit 0;
- each step that yields events sends one :class:`Steps`; a :class:`Snapshot` follows at most
  every ``SNAPSHOT_S`` while there is work, and once when the engine goes idle;
- the API process gone (EOF) -> exit 0; the engine loop raising -> :class:`Failed`, exit 1.
  SIGINT and SIGTERM are ignored: the API process drains first and then sends ``Stop``.
"""

from __future__ import annotations

import select
import signal
import socket
import sys
import time

from . import adapter
from .protocol import (SNAPSHOT_S, Abort, EngineSpec, Failed, FrameReader, Ready, Steps, Stop,
                       Submit, decode_to_engine, frame, recv_frame)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=int(argv[0]))
    body = recv_frame(sock)
    if body is None:
        return 0
    spec = decode_to_engine(body)
    if not isinstance(spec, EngineSpec):
        sock.sendall(frame(Failed("the first frame was not the engine spec", 2)))
        return 2
    try:
        built = adapter.build(spec)
    except Exception as err:  # every start-up failure is one line for the API process
        code = getattr(err, "exit_code", 1)
        sock.sendall(frame(Failed(_one_line(err), code if isinstance(code, int) else 1)))
        return code if isinstance(code, int) else 1
    import os
    sock.sendall(frame(Ready(
        model=built.model, vocab=built.vocab, context=built.context,
        max_tokens=built.max_tokens, pages_total=built.pages_total,
        page_tokens=built.page_tokens, pool_bytes=built.pool_bytes, max_seqs=built.max_seqs,
        buckets=list(built.buckets), capture_s=built.capture_s, pid=os.getpid(),
        gpu_bytes=built.gpu_bytes() if built.gpu_bytes is not None else 0)))
    sock.sendall(frame(adapter.snapshot(built)))
    try:
        return Loop(built, sock).run()
    finally:
        if built.close is not None:
            built.close()


def _one_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    if not hasattr(err, "problems"):
        text = f"{type(err).__name__}: {text}"
    return text


class Loop:
    def __init__(self, built: adapter.Built, sock: socket.socket) -> None:
        self.built, self.engine, self.sock = built, built.engine, sock
        self.reader = FrameReader()
        self.live: set[str] = set()
        self.last_snapshot = 0.0
        self.dirty = False

    def run(self) -> int:
        while True:
            busy = self.engine.has_work()
            if not self._read(0.0 if busy else (SNAPSHOT_S if self.dirty else None)):
                return 0
            if self.engine.has_work():
                try:
                    self._step()
                except Exception as err:  # the engine is gone: say so, then exit 1
                    self.sock.sendall(frame(Failed(f"engine step failed: {_one_line(err)}")))
                    return 1
            now = time.monotonic()
            if self.dirty and (now - self.last_snapshot >= SNAPSHOT_S
                               or not self.engine.has_work()):
                self.sock.sendall(frame(adapter.snapshot(self.built)))
                self.last_snapshot, self.dirty = now, self.engine.has_work()

    def _read(self, timeout: float | None) -> bool:
        """Handle every frame waiting (waiting up to ``timeout`` for the first); False when
        the API process is gone or sent Stop."""
        r, _, _ = select.select([self.sock], [], [], timeout)
        while r:
            data = self.sock.recv(1 << 20)
            if not data:
                return False
            for body in self.reader.feed(data):
                msg = decode_to_engine(body)
                if isinstance(msg, Stop):
                    return False
                self._handle(msg)
            r, _, _ = select.select([self.sock], [], [], 0)
        return True

    def _handle(self, msg) -> None:
        self.dirty = True
        if isinstance(msg, Submit):
            refusal = adapter.submit(self.engine, msg)
            if refusal is not None:
                self.sock.sendall(frame(refusal))
            else:
                self.live.add(msg.id)
        elif isinstance(msg, Abort) and msg.id in self.live:
            self.engine.abort(msg.id)

    def _step(self) -> None:
        t0 = time.perf_counter()
        events = self.engine.step()
        dt = time.perf_counter() - t0
        self.dirty = True
        if not events:
            return
        rows = adapter.rows(events)
        for rid, _, finish, _ in rows:
            if finish is not None:
                self.live.discard(rid)
        tokens = sum(1 for r in rows if r[1] is not None)
        self.sock.sendall(frame(Steps(rows, dt, adapter.bucket_of(self.built.buckets, tokens))))


if __name__ == "__main__":
    sys.exit(main())
