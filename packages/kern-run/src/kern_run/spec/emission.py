"""Token emission shared by the speculative loops (:mod:`.loop`, :mod:`.dspark`).

A loop subclassing :class:`Emission` sets, before its first :meth:`~Emission.emit`: ``res``
(the :class:`~kern_run.generate.Result` being filled), ``seq`` (i64 host array, the prompt in
``seq[:n]``), ``n``, ``steps``, ``eos`` (a set of ids), ``on_token`` (or None), ``produced``
= 0 and ``stream`` = []."""

from __future__ import annotations


class Emission:
    def emit(self, tok: int) -> bool:
        """Emit one token; True when generation stops (EOS: not kept; or the step limit)."""
        self.produced += 1
        if tok in self.eos:
            self.res.stop, self.res.eos_token = "eos", tok
            return True
        self.seq[self.n + self.produced - 1] = tok
        self.res.tokens.append(tok)
        self.stream.append(tok)
        if self.produced >= self.steps:
            self.res.stop = "steps"
            return True
        return False

    def flush(self) -> None:
        """Pass the tokens emitted since the last flush to ``on_token``."""
        if self.on_token is not None:
            for t in self.stream:
                self.on_token(t)
        self.stream.clear()
