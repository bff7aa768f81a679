"""One request's life in the API process: submitted to the engine, its tokens turned into
text pieces, its end (finish reason and usage) and its metrics.

:meth:`Run.next` returns the text released by the next batch of engine events and the finish
reason once there is one. A refusal by the engine raises a 400 :class:`APIError`; an engine
failure raises :class:`EngineFailed`. A stop string ends the run on the API side and aborts
the sequence in the engine (pages free at once). :meth:`Run.abort` (a disconnected client, a
cancelled handler) is idempotent and also only needs the engine's next step.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from kern_run.tokenizer import TextTokenizer

from .client import EngineClient
from .errors import APIError
from .metrics import Metrics
from .protocol import Submit
from .schemas import Prepared
from .textgen import TextStream

#: Engine refusal code -> the parameter to blame when the engine names none.
REFUSAL_PARAM = {"context_length_exceeded": "prompt", "pool_too_small": "max_tokens",
                 "invalid_prompt": "prompt"}


class EngineFailed(Exception):
    """The engine process died or failed this request."""


class Disconnected(Exception):
    """The client went away before the answer was complete."""


@dataclass
class Service:
    client: EngineClient
    tok: TextTokenizer
    metrics: Metrics
    model: str


class Run:
    def __init__(self, svc: Service, prep: Prepared, t_arrival: float) -> None:
        self.svc, self.prep, self.t0 = svc, prep, t_arrival
        prefix = "chatcmpl-" if prep.kind == "chat" else "cmpl-"
        self.id = prefix + uuid.uuid4().hex
        self.created = int(time.time())
        self.text = TextStream(svc.tok, prep.stops)
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.finish: str | None = None
        self.ended = False
        self.feed = svc.client.submit(Submit(self.id, prep.prompt, prep.max_tokens,
                                             prep.stop_token_ids, prep.ignore_eos))

    async def next(self) -> tuple[str, str | None]:
        """(text released, finish reason or None); call until a finish reason comes."""
        if self.finish is not None:
            return "", self.finish
        items = await self.feed.get()
        out: list[str] = []
        m = self.svc.metrics
        for item in items:
            kind = item[0]
            if kind == "token":
                now = item[2]
                if self.first_t is None:
                    self.first_t = now
                    m.ttft.observe(now - self.t0)
                else:
                    m.itl.observe(now - self.last_t)  # type: ignore[operator]
                self.last_t = now
                piece = self.text.push(item[1])
                if piece:
                    out.append(piece)
                if self.text.stopped:
                    self.svc.client.abort(self.id)
                    self._end("stop")
                    break
            elif kind == "finish":
                self.last_t = item[3]
                out.append(self.text.finish())
                if item[1] == "error":
                    self._end("error")
                    raise EngineFailed("the engine failed this request")
                self._end(item[1])
            elif kind == "refused":
                self._end("refused")
                r = item[1]
                raise APIError(400, r.message, r.param or REFUSAL_PARAM.get(r.code), r.code)
            elif kind == "error":
                self._end("error")
                raise EngineFailed(item[1])
            elif kind == "closed":
                self._end("abort")
                raise Disconnected()
        return "".join(out), self.finish

    def abort(self) -> None:
        if not self.ended:
            self.svc.client.abort(self.id)
            self._end("abort")

    def _end(self, reason: str) -> None:
        if self.ended:
            return
        self.ended, self.finish = True, reason
        m = self.svc.metrics
        m.finished.labels(reason=reason).inc()
        if reason == "refused":
            return
        m.prompt_tokens.inc(len(self.prep.prompt))
        m.generation_tokens.inc(self.text.tokens)
        end = self.last_t if self.last_t is not None else time.perf_counter()
        m.e2e.observe(end - self.t0)
        if self.first_t is not None and self.text.tokens > 1:
            m.tpot.observe((end - self.first_t) / (self.text.tokens - 1))

    def usage(self) -> dict[str, int]:
        p, n = len(self.prep.prompt), self.text.tokens
        return {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n}
