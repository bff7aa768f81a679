"""Prompt-lookup drafting: propose the tokens that followed the most recent earlier
occurrence of the sequence's last n tokens (n from ``n_max`` down to ``n_min``), searched in
the prompt and the output so far. Needs no weights; it pays off where the output copies its
input (code edits, summaries, extraction) and finds nothing on free text.

The index is incremental: for every n it maps each n-gram to the end of its most recent
occurrence, and on each appended token remembers where the new suffix n-gram occurred
before. :meth:`NgramProposer.extend` costs one tuple of n_max tokens and n_max − n_min + 1
dict operations per token, :meth:`NgramProposer.propose` O(n_max − n_min + k): no rescan of
the history per round."""

from __future__ import annotations

from collections.abc import Iterable

#: The default n-gram range (n_min, n_max): a starting point for the bench to tune. n = 1
#: matches almost always on free text and turns plain decode steps into verify rounds that
#: mostly reject (a verify round costs more than a decode step); n ≥ 2 keeps precision.
DEFAULT_NGRAM = (2, 4)


class NgramProposer:
    """The sequence (prompt, then every emitted token, in order) and its n-gram index.

    :meth:`propose` answers for the sequence as extended so far: the k tokens that followed
    the most recent earlier occurrence of its last n tokens, for the largest n in
    ``[n_min, n_max]`` that has one, or ``[]``. When the continuation runs into the end of
    the sequence (the match overlaps the suffix: a repeating pattern of period P < k), it is
    continued periodically, as if the pattern went on: token m is ``seq[e + m % P]`` where the
    earlier occurrence ends at ``e`` and P = len(seq) − e."""

    def __init__(self, n_min: int = DEFAULT_NGRAM[0], n_max: int = DEFAULT_NGRAM[1]) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError(f"n-gram range must satisfy 1 ≤ n_min ≤ n_max "
                             f"(got {n_min}…{n_max})")
        self.n_min, self.n_max = n_min, n_max
        self.seq: list[int] = []
        # _ns[i] = n for index i, largest first (propose tries them in this order)
        self._ns = list(range(n_max, n_min - 1, -1))
        # _last[i]: n-gram (tuple) -> end (exclusive) of its most recent occurrence
        self._last: list[dict[tuple[int, ...], int]] = [{} for _ in self._ns]
        # _prev[i]: end of the previous occurrence of the current suffix n-gram, or -1
        self._prev: list[int] = [-1] * len(self._ns)

    def __len__(self) -> int:
        return len(self.seq)

    def extend(self, tokens: Iterable[int]) -> None:
        """Append ``tokens`` to the sequence (the caller appends every token it emits, in
        order, and nothing else: drafts are never appended)."""
        seq, ns, last, prev = self.seq, self._ns, self._last, self._prev
        top = self.n_max
        append = seq.append
        for t in tokens:
            append(int(t))
            end = len(seq)
            if end >= top:
                # one tuple of the last n_max tokens; each shorter n-gram is its tail
                gram = tuple(seq[-top:])
                for d, i in zip(last, range(len(ns))):
                    prev[i] = d.get(gram, -1)
                    d[gram] = end
                    gram = gram[1:]
                continue
            for i, n in enumerate(ns):            # the first n_max − 1 tokens
                if end < n:
                    prev[i] = -1
                    continue
                gram = tuple(seq[end - n:end])
                prev[i] = last[i].get(gram, -1)
                last[i][gram] = end

    def propose(self, k: int) -> list[int]:
        """Up to ``k`` draft tokens for the positions after the sequence, or ``[]`` when no
        n-gram of the range recurs (or ``k`` < 1)."""
        if k < 1:
            return []
        for e in self._prev:          # largest n first
            if e >= 0:
                seq = self.seq
                period = len(seq) - e  # ≥ 1: the earlier occurrence ends before the suffix
                if period >= k:
                    return seq[e:e + k]
                return [seq[e + m % period] for m in range(k)]
        return []

    def match(self) -> int:
        """The n of the match :meth:`propose` would use, or 0 when there is none."""
        for n, e in zip(self._ns, self._prev):
            if e >= 0:
                return n
        return 0
