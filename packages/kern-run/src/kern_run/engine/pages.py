"""The KV page allocator: pages of :data:`PAGE_TOKENS` token slots, page 0 the pad page.

Page ``p`` holds slots ``[16 p, 16 p + 16)`` of every KV state. Page 0 is reserved: a pad row
of a bucket writes and reads slot 0, so no sequence may own it. Every other page is free
(refcount 0) or held (refcount ≥ 1); ``incref`` lets a second sequence share a held page
(prefix sharing), ``free`` drops one reference and returns the page to the free list at 0.

The free list is LIFO: the page freed last is given out first (its lines are warm; and a
test of stale KV gets the most recently used page back)."""

from __future__ import annotations

from collections.abc import Iterable

from kern_manifest.contract import PAGE_TOKENS

from ..errors import KernRunError

PAD_PAGE = 0


def pages_for(tokens: int) -> int:
    """Pages that hold ``tokens`` token slots."""
    return -(-tokens // PAGE_TOKENS)


class PageError(KernRunError):
    """A misuse of the allocator (a double free, a foreign page): an engine bug."""


class PagePool:
    """``pages`` pages, page 0 reserved; ``alloc`` / ``free`` / ``incref``."""

    def __init__(self, pages: int) -> None:
        if pages < 2:
            raise KernRunError(f"capacity: a pool of {pages} pages has no page beside the pad "
                               f"page; give at least {2 * PAGE_TOKENS} token slots")
        self.pages = pages
        self._ref = [0] * pages
        self._free = list(range(pages - 1, PAD_PAGE, -1))   # pop() gives 1, 2, 3, …

    @property
    def total(self) -> int:
        """Pages a sequence may get (the pad page excluded)."""
        return self.pages - 1

    @property
    def free_count(self) -> int:
        return len(self._free)

    @property
    def held_count(self) -> int:
        return self.total - len(self._free)

    def refcount(self, page: int) -> int:
        self._check(page)
        return self._ref[page]

    def can_alloc(self, n: int) -> bool:
        return n <= len(self._free)

    def alloc(self, n: int) -> list[int]:
        """``n`` free pages, each now held once; refuses (nothing taken) if fewer are free."""
        if n < 0:
            raise PageError(f"alloc: n must be at least 0 (got {n})")
        if n > len(self._free):
            raise PageError(f"alloc: {n} pages asked, {len(self._free)} free")
        got = [self._free.pop() for _ in range(n)]
        for p in got:
            self._ref[p] = 1
        return got

    def incref(self, pages: Iterable[int]) -> None:
        """One more reference to each held page (a sequence sharing it)."""
        pages = list(pages)
        for p in pages:
            self._check(p)
            if self._ref[p] == 0:
                raise PageError(f"incref: page {p} is free")
        for p in pages:
            self._ref[p] += 1

    def free(self, pages: Iterable[int]) -> None:
        """Drop one reference to each page; a page at 0 goes back to the free list. Refuses
        (nothing changed) a free page, the pad page, or a page listed more often than it is
        held."""
        pages = list(pages)
        drop: dict[int, int] = {}
        for p in pages:
            self._check(p)
            drop[p] = drop.get(p, 0) + 1
            if drop[p] > self._ref[p]:
                raise PageError(f"free: page {p} is not held (a double free)")
        for p in pages:
            self._ref[p] -= 1
            if self._ref[p] == 0:
                self._free.append(p)

    def _check(self, page: int) -> None:
        if not isinstance(page, int) or not 0 < page < self.pages:
            raise PageError(f"page {page!r} is not a page of this pool (1…{self.pages - 1}; "
                            f"page 0 is the pad page)")
