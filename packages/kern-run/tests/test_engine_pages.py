"""The page allocator: a model-based property test (no leak, no double free, refcounts) and
its refusals."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kern_run.engine.pages import PagePool, PageError, pages_for


class PoolMachine(RuleBasedStateMachine):
    """Owners allocate, share (incref) and free pages; a plain dict of refcounts is the
    model the pool must agree with."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = PagePool(12)
        self.model = {p: 0 for p in range(1, 12)}
        self.owners: list[list[int]] = []

    @rule(n=st.integers(0, 13))
    def alloc(self, n):
        free = [p for p, r in self.model.items() if r == 0]
        if n > len(free):
            with pytest.raises(PageError, match="pages asked"):
                self.pool.alloc(n)
            return
        got = self.pool.alloc(n)
        assert len(set(got)) == n and all(self.model[p] == 0 for p in got)
        assert 0 not in got
        for p in got:
            self.model[p] = 1
        self.owners.append(got)

    @precondition(lambda self: self.owners)
    @rule(i=st.integers(0, 100))
    def share(self, i):
        pages = self.owners[i % len(self.owners)]
        self.pool.incref(pages)
        for p in pages:
            self.model[p] += 1
        self.owners.append(list(pages))

    @precondition(lambda self: self.owners)
    @rule(i=st.integers(0, 100))
    def free(self, i):
        pages = self.owners.pop(i % len(self.owners))
        self.pool.free(pages)
        for p in pages:
            self.model[p] -= 1

    @rule(page=st.integers(-1, 13))
    def double_free_refused(self, page):
        if 1 <= page < 12 and self.model[page] > 0:
            return
        before = self.pool.free_count
        with pytest.raises(PageError):
            self.pool.free([page])
        assert self.pool.free_count == before

    @invariant()
    def agrees(self):
        for p, r in self.model.items():
            assert self.pool.refcount(p) == r
        assert self.pool.free_count == sum(r == 0 for r in self.model.values())
        assert self.pool.held_count + self.pool.free_count == self.pool.total == 11

    def teardown(self):
        for pages in self.owners:
            self.pool.free(pages)
        assert self.pool.free_count == self.pool.total       # no leak


TestPool = PoolMachine.TestCase
TestPool.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)


def test_free_refuses_a_page_listed_twice_and_changes_nothing():
    pool = PagePool(4)
    a = pool.alloc(2)
    with pytest.raises(PageError, match="double free"):
        pool.free([a[0], a[1], a[0]])
    assert pool.refcount(a[0]) == 1 and pool.refcount(a[1]) == 1
    pool.free(a)
    assert pool.free_count == 3


def test_pad_page_is_never_given_or_taken():
    pool = PagePool(3)
    assert sorted(pool.alloc(2)) == [1, 2]
    with pytest.raises(PageError, match="pad page"):
        pool.free([0])
    with pytest.raises(PageError, match="pages asked"):
        pool.alloc(1)


def test_a_shared_page_returns_after_its_last_reference():
    pool = PagePool(3)
    (p,) = pool.alloc(1)
    pool.incref([p])
    pool.free([p])
    assert pool.free_count == 1 and pool.refcount(p) == 1
    pool.free([p])
    assert pool.free_count == 2
    with pytest.raises(PageError, match="is free"):
        pool.incref([p])


def test_pool_needs_a_page_beside_the_pad_page():
    with pytest.raises(Exception, match="capacity"):
        PagePool(1)


@pytest.mark.parametrize("tokens, pages", [(0, 0), (1, 1), (16, 1), (17, 2), (32, 2), (33, 3)])
def test_pages_for(tokens, pages):
    assert pages_for(tokens) == pages
