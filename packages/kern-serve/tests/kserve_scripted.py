"""An engine factory for the tests that need chosen output tokens (an emoji split across
byte-level tokens, a stop string across token boundaries): the fake engine, with the
delivered tokens of a request whose prompt is a key of :data:`SCRIPTS` replaced, one by one,
by the SmolLM2 encoding of its script (scheduling, pages and finishes stay the engine's: ask
for ``max_tokens = len(script_ids(key))``)."""

from __future__ import annotations

from typing import Any

from kern_serve.adapter import open_fake

#: prompt text -> the completion text the engine "generates" for it
SCRIPTS = {
    "emoji:": "Robot 🤖 says héllo to 日本語 ✨ and 👩‍🚀 ok",
    "stop:": "alpha beta gamma delta epsilon zeta",
}


def script_ids(tok, key: str) -> list[int]:
    return tok.tokenizer.encode(SCRIPTS[key], add_special_tokens=False).ids


class Scripted:
    def __init__(self, engine: Any, scripts: dict[tuple[int, ...], list[int]]) -> None:
        self._e, self._scripts = engine, scripts
        self._active: dict[str, list[int]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._e, name)

    def submit(self, req) -> None:
        self._e.submit(req)
        script = self._scripts.get(tuple(req.prompt))
        if script is not None:
            self._active[req.id] = list(script)

    def step(self) -> list[Any]:
        from kern_run.engine import TokenEvent
        out = []
        for ev in self._e.step():
            left = self._active.get(ev.id)
            if left is not None and ev.token is not None and left:
                ev = TokenEvent(ev.id, left.pop(0), ev.finish, ev.stop_token)
            if ev.finish is not None:
                self._active.pop(ev.id, None)
            out.append(ev)
        return out


def make(spec):
    from kern_run.defaults import gguf_path
    from kern_run.tokenizer import load_tokenizer
    tok = load_tokenizer(gguf_path())
    built = open_fake(spec)
    scripts = {tuple(tok.tokenizer.encode(k, add_special_tokens=False).ids): script_ids(tok, k)
               for k in SCRIPTS}
    built.engine = Scripted(built.engine, scripts)
    return built
