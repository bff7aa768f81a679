"""OpenAI's response objects for one run: the whole answer, or the SSE chunks of a stream.

A stream is ``data: {chunk}\\n\\n`` events: (chat) an opening chunk with the assistant role,
one chunk per released text piece, a closing chunk with the finish reason, then — when
``stream_options.include_usage`` — a chunk with empty ``choices`` and the ``usage``, then
``data: [DONE]``. With ``include_usage`` every other chunk carries ``"usage": null``, as
OpenAI's do. Text chunks are assembled from pre-encoded prefix and suffix bytes (the hot path:
one per token per request).
"""

from __future__ import annotations

from typing import Any

import msgspec

from .service import Run

_enc = msgspec.json.Encoder()


class Chunks:
    def __init__(self, run: Run, model: str) -> None:
        self.run = run
        self.chat = run.prep.kind == "chat"
        self.usage = run.prep.include_usage
        self.obj = "chat.completion.chunk" if self.chat else "text_completion"
        self.head = {"id": run.id, "object": self.obj, "created": run.created, "model": model}
        sample = self._chunk(self._choice("\x00", None))
        pre, _, post = _enc.encode(sample).partition(b'"\\u0000"')
        self.prefix, self.suffix = b"data: " + pre, post + b"\n\n"

    def _choice(self, text: str | None, finish: str | None) -> dict[str, Any]:
        if self.chat:
            delta = {} if text is None else {"content": text}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}

    def _chunk(self, choice: dict[str, Any] | None) -> dict[str, Any]:
        out = dict(self.head, choices=[choice] if choice is not None else [])
        if self.usage:
            out["usage"] = None
        return out

    def _event(self, obj: dict[str, Any]) -> bytes:
        return b"data: " + _enc.encode(obj) + b"\n\n"

    def opening(self) -> bytes:
        """The first event: the assistant role (chat), the echoed prompt (completions with
        echo), else nothing."""
        if self.chat:
            c = self._chunk(self._choice("", None))
            c["choices"][0]["delta"] = {"role": "assistant", "content": ""}
            return self._event(c)
        if self.run.prep.echo:
            return self.delta(self.run.prep.echo)
        return b""

    def delta(self, text: str) -> bytes:
        return self.prefix + _enc.encode(text) + self.suffix

    def closing(self, finish: str | None) -> bytes:
        out = self._event(self._chunk(self._choice(None if self.chat else "", finish)))
        if self.usage:
            out += self._event(dict(self.head, choices=[], usage=self.run.usage()))
        return out

    def error(self, body: dict[str, Any]) -> bytes:
        return self._event(body)

    @staticmethod
    def done() -> bytes:
        return b"data: [DONE]\n\n"

    def whole(self, text: str, finish: str | None) -> dict[str, Any]:
        """The non-streaming answer."""
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "logprobs": None, "finish_reason": finish}
            obj = "chat.completion"
        else:
            if self.run.prep.echo:
                text = self.run.prep.echo + text
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            obj = "text_completion"
        return dict(self.head, object=obj, choices=[choice], usage=self.run.usage())
