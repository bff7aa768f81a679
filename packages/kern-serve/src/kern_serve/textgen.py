"""Token ids -> the text a client is sent: incremental detokenization and stop strings.

- Text comes from kern-run's :class:`~kern_run.tokenizer.Detokenizer`: a token that ends
  inside a UTF-8 character yields nothing until the character is complete, so no piece ever
  carries half a character (or U+FFFD for one).
- Stop strings are held back while they could still match: after each token the text that
  is released ends before the longest suffix of the pending text that is a prefix of a stop
  string. When a stop string appears, the text before its first occurrence is released and
  the stream is done (``stopped``); the stop string itself is never sent. The pieces of a
  stream concatenated are therefore the same text whatever the token boundaries, equal to
  the non-streaming answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from kern_run.tokenizer import TextTokenizer


class TextStream:
    def __init__(self, tok: TextTokenizer, stops: Sequence[str] = ()) -> None:
        self.detok = tok.stream()
        self.stops = [s for s in stops if s]
        self.longest = max((len(s) for s in self.stops), default=0)
        self.pending = ""      # decoded text not yet released (a possible stop-string start)
        self.stopped = False   # a stop string was found: nothing more is released
        self.tokens = 0        # tokens pushed (the completion's token count)

    def push(self, token: int) -> str:
        """The text released by one more generated token ("" while held back)."""
        if self.stopped:
            return ""
        self.tokens += 1
        piece = self.detok.push(token)
        return self._release(piece, final=False) if piece else ""

    def finish(self) -> str:
        """The rest when the sequence ended: the detokenizer's tail, stop strings checked."""
        if self.stopped:
            return ""
        return self._release(self.detok.flush(), final=True)

    def _release(self, piece: str, final: bool) -> str:
        if not self.stops:
            return piece
        # a stop string can only start within the last `longest - 1` pending characters
        # or in the new piece
        start = max(0, len(self.pending) - self.longest + 1)
        text = self.pending + piece
        hit = min((i for i in (text.find(s, start) for s in self.stops) if i >= 0),
                  default=-1)
        if hit >= 0:
            self.stopped, self.pending = True, ""
            return text[:hit]
        keep = 0 if final else self._held(text)
        self.pending = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep]

    def _held(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of a stop."""
        for k in range(min(self.longest - 1, len(text)), 0, -1):
            tail = text[-k:]
            if any(s.startswith(tail) for s in self.stops):
                return k
        return 0
