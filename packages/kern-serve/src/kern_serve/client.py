"""The API process's side of the engine process: spawn it, send submits and aborts, route each
step's events to the requests they belong to.

States: ``loading`` (spawned, no Ready yet) -> ``ready`` -> ``stopped`` (after :meth:`stop`),
or ``failed`` (start-up failed, or the process died or reported its loop dead). On failure
every request in flight gets an ``error`` item and ``on_failure(exit_code, message)`` is
called once (the server then shuts down and exits non-zero).

A request is registered from :meth:`submit` until its finishing event (or refusal) arrives,
even when the API side stopped listening (stop string, disconnect): the registry's size is
what the engine still holds, which the queue limit counts.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import msgspec

from .protocol import (Abort, EngineSpec, Failed, Ready, Refusal, Snapshot, Steps, Stop,
                       Submit, decode_from_engine, frame)


class Feed:
    """One request's items from the engine, handed over in batches (one wake-up per step).

    Items: ``("token", id, t)``, ``("finish", reason, stop_token, t)``,
    ``("refused", Refusal)``, ``("error", message)``; ``("closed",)`` once the API side
    closed it (:meth:`close`) and nothing else is pending."""

    __slots__ = ("items", "waiter", "closed", "done")

    def __init__(self) -> None:
        self.items: list[tuple] = []
        self.waiter: asyncio.Future | None = None
        self.closed = False   # the API side stopped listening
        self.done = False     # the engine finished it (no more items)

    def put(self, item: tuple) -> None:
        if self.closed:
            return
        self.items.append(item)
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def close(self) -> None:
        self.closed = True
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def get(self) -> list[tuple]:
        while not self.items:
            if self.closed:
                return [("closed",)]
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        out, self.items = self.items, []
        return out


class EngineClient:
    def __init__(self, spec: EngineSpec, on_failure: Callable[[int, str], None],
                 on_ready: Callable[[Ready], None] | None = None,
                 on_steps: Callable[[Steps | Snapshot], None] | None = None) -> None:
        self.spec = spec
        self.on_failure, self.on_ready, self.on_steps = on_failure, on_ready, on_steps
        self.state = "loading"
        self.ready: Ready | None = None
        self.snapshot: Snapshot | None = None
        self.failure: str | None = None
        self.feeds: dict[str, Feed] = {}
        self.proc: subprocess.Popen | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self.ready_event = asyncio.Event()

    async def start(self) -> None:
        parent, child = socket.socketpair()
        self.proc = subprocess.Popen([sys.executable, "-m", "kern_serve.worker",
                                      str(child.fileno())], pass_fds=[child.fileno()])
        child.close()
        reader, self._writer = await asyncio.open_connection(sock=parent, limit=1 << 26)
        self._writer.write(frame(self.spec))
        self._reader_task = asyncio.create_task(self._read(reader))

    # -- requests ---------------------------------------------------------------------------
    def submit(self, sub: Submit) -> Feed:
        feed = Feed()
        self.feeds[sub.id] = feed
        self._send(sub)
        return feed

    def abort(self, rid: str) -> None:
        """Stop listening to ``rid`` and free its sequence (its pages return at once)."""
        feed = self.feeds.get(rid)
        if feed is not None and not feed.closed:
            feed.close()
            if self.state == "ready":
                self._send(Abort(rid))

    def _send(self, msg: msgspec.Struct) -> None:
        if self._writer is not None and self.state in ("loading", "ready"):
            self._writer.write(frame(msg))

    async def stop(self, timeout: float = 30.0) -> None:
        """Tell the engine process to close and wait for it (killed after ``timeout``)."""
        if self.state in ("loading", "ready"):
            self.state = "stopped"
            try:
                if self._writer is not None:
                    self._writer.write(frame(Stop()))
                    await self._writer.drain()
            except (ConnectionError, OSError):
                pass
        await self._reap(timeout)

    async def _reap(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self._writer is not None:
            self._writer.close()
        return self.proc.returncode

    # -- the link ---------------------------------------------------------------------------
    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                head = await reader.readexactly(4)
                msg = decode_from_engine(await reader.readexactly(int.from_bytes(head, "big")))
                if isinstance(msg, Steps):
                    self._steps(msg)
                elif isinstance(msg, Snapshot):
                    self.snapshot = msg
                    if self.on_steps is not None:
                        self.on_steps(msg)
                elif isinstance(msg, Refusal):
                    feed = self.feeds.pop(msg.id, None)
                    if feed is not None:
                        feed.put(("refused", msg))
                elif isinstance(msg, Ready):
                    self._ready(msg)
                elif isinstance(msg, Failed):
                    await self._fail(msg.exit_code, msg.message)
                    return
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        if self.state != "stopped":
            code = await self._reap(5.0)
            await self._fail(1, f"the engine process exited (status {code})")

    def _ready(self, msg: Ready) -> None:
        self.ready, self.state = msg, "ready"
        self.ready_event.set()
        if self.on_ready is not None:
            self.on_ready(msg)

    def _steps(self, msg: Steps) -> None:
        now = time.perf_counter()
        feeds = self.feeds
        for rid, token, finish, stop_token in msg.events:
            feed = feeds.get(rid)
            if feed is None:
                continue
            if token is not None:
                feed.put(("token", token, now))
            if finish is not None:
                del feeds[rid]
                feed.put(("finish", finish, stop_token, now))
                feed.done = True
        if self.on_steps is not None:
            self.on_steps(msg)

    async def _fail(self, code: int, message: str) -> None:
        if self.state in ("failed", "stopped"):
            return
        self.state, self.failure = "failed", message
        feeds, self.feeds = self.feeds, {}
        for feed in feeds.values():
            feed.put(("error", message))
        self.ready_event.set()
        if self.proc is not None and self.proc.poll() is None:
            await self._reap(5.0)
        self.on_failure(code, message)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def in_flight(self) -> int:
        return len(self.feeds)

