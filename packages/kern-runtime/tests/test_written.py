"""An output no run has written is refused to the host reads, ``copy`` and a sequence's
copies (kern_runtime.written), on the null device: the toy manifest plus a program ``fill``
that writes only the workspace ``h`` (as a ``prefill`` writes only the KV cache)."""

from __future__ import annotations

import pytest

from kern_runtime import CallerError, Copy, Run, Store
from kern_runtime.written import program_writes
from test_readback import toy_runtime

#: The null device's records of queued work.
QUEUED = ("graph", "launch", "copies", "d2d")
REFUSED = r"no run since the runtime was loaded wrote `y`, so it holds no result"


@pytest.fixture
def toy(tmp_path):
    def add_fill(obj):
        obj["programs"]["fill"] = {"dispatches": obj["programs"]["step"]["dispatches"][:1]}
    return toy_runtime(tmp_path, add_fill)


def test_program_writes_follow_the_out_parameters(toy):
    rt, _ = toy
    assert program_writes(rt.vm) == {"step": frozenset({"h", "y"}), "fill": frozenset({"h"})}


def test_a_read_before_any_run_that_writes_it_is_refused_and_queues_nothing(toy):
    rt, dev = toy
    n = len(dev.calls)
    with pytest.raises(CallerError, match=REFUSED + r" \(programs run so far: none\)") as e:
        rt.read("y")
    assert "help: run a program that writes `y` first (`step`)" in str(e.value)
    assert len(dev.calls) == n
    rt.run("fill", {"tokens": 2})
    for read in (rt.read, rt.read_async):
        with pytest.raises(CallerError, match=r"read `y`: " + REFUSED +
                           r" \(programs run so far: `fill`\)"):
            read("y")
    rt.read("h")                       # a workspace: the caller's own business, not tracked
    rt.run("step", {"tokens": 2}, graph=False)
    assert rt.read("y").shape == (2,) and rt.read_async("y").wait().shape == (2,)
    rt.run("fill", {"tokens": 2})      # y keeps step's result: written stays written
    assert rt.read("y").shape == (2,)


def test_copy_and_a_sequence_copy_of_an_unwritten_output_are_refused(toy):
    rt, dev = toy
    # (no input of the toy has `y`'s dtype: this check comes before the copy's own ones)
    with pytest.raises(CallerError, match=r"copy `y` into `x`: " + REFUSED):
        rt.copy("x", "y")
    n = len(dev.calls)
    before = (Copy.of("x", "h", {"tokens": 1}), Copy.of("x", "h", {"tokens": 1}))
    rt.run_sequence(before + (Run.of("fill", {"tokens": 2}),))   # h: a workspace, allowed
    assert len(dev.calls) > n
    box = rt.mailbox(64)
    ops = (Run.of("fill", {"tokens": 2}), Store.of(box, "y", 0, {"tokens": 2}))
    for graph in (True, False):
        n = len(dev.calls)
        with pytest.raises(CallerError, match=r"run_sequence: " + REFUSED +
                           r" \(programs run so far: `fill`\)"):
            rt.run_sequence(ops, graph=graph, copy_kernel=True)
        assert not [c for c in dev.calls[n:] if c[0] in QUEUED]
    rt.run("step", {"tokens": 2})
    n = len(dev.calls)
    rt.run_sequence(ops, copy_kernel=True)
    assert [c[0] for c in dev.calls[n:] if c[0] in QUEUED] == ["graph"]


def test_a_sequence_copy_after_its_own_writer_runs(toy):
    rt, _ = toy
    ops = (Run.of("step", {"tokens": 2}), Copy.of("x", "h", {"tokens": 2}))
    eff = rt._sequence_effects(ops)
    assert eff == ((), ("step",))      # step writes h before the copy reads it
    rt.run_sequence(ops)
    assert rt.read("y").shape == (2,)  # the sequence's run counts as written
