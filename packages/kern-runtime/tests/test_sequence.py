"""``Runtime.run_sequence`` on the null device: one graph of several runs and copies, in list
order, keyed by the ops; eager runs the same steps; every op is checked before anything is
queued."""

from __future__ import annotations

import pytest

from kern_runtime import CallerError, Copy, Load, Run, Store
from kern_runtime.sequence import MAX_GROUP, copy_groups
from test_readback import toy_runtime

#: The toy's `step` program: `norm` (x → h), then `energy` (h, cache → y); a copy h → x.
OPS = (Copy.of("x", "h", {"tokens": 2}), Run.of("step", {"tokens": 2}),
       Copy.of("x", "h", {"tokens": 1}, dst_row=3), Run.of("step", {"tokens": 4}))


#: A run of `step` launches three kernel steps (`energy` is partial + reduce).
STEPS = ["d2d", "toy_rms_norm", "toy_partial", "toy_reduce"] * 2


def _launch_names(calls):
    """d2d / copies, or the launched kernel's symbol."""
    return [c[1].split("`")[-2] if c[0] == "launch" else c[0] for c in calls]


def _kernel_copies(steps):
    """With the copy kernel: each lone copy is a one-segment ``copies`` launch."""
    return ["copies" if s == "d2d" else s for s in steps]


def test_one_graph_holds_the_runs_and_copies_in_order(tmp_path):
    rt, dev = toy_runtime(tmp_path)
    x, h = rt.addresses.buffers["x"], rt.addresses.buffers["h"]
    n = len(dev.calls)
    rt.run_sequence(OPS)                                   # memcpys: the default
    captures = dev.ops("capture")
    assert len(captures) == 1 and captures[0][1] == "sequence copy+step+copy+step"
    (graph,) = rt._graphs.values()
    assert _launch_names(graph.steps) == STEPS
    assert graph.steps[0] == ("d2d", x, h, 512, "copy `h` into `x`")
    assert graph.steps[4] == ("d2d", x + 3 * 256, h, 256, "copy `h` into `x`")
    assert [c[0] for c in dev.calls[n:] if c[0] in ("graph", "d2d", "launch")] == ["graph"]
    rt.run_sequence(OPS)                                   # replayed, not captured again
    assert len(dev.ops("capture")) == 1 and len(dev.ops("graph")) == 2
    assert rt.graphs[-1].program == "[copy+step+copy+step]"
    rt.run_sequence(OPS[:2])                               # another list: another graph
    assert len(dev.ops("capture")) == 2
    rt.run_sequence(OPS, copy_kernel=True)                 # the copy kernel: another graph
    assert len(dev.ops("capture")) == 3
    steps = list(rt._graphs.values())[-1].steps
    assert _launch_names(steps) == _kernel_copies(STEPS)
    assert steps[0] == ("copies", ((x, h, 512),), "copy `h` into `x`")
    rt.close()


@pytest.mark.parametrize("copy_kernel", [False, True])
def test_eager_queues_the_same_steps_and_moves_the_data(tmp_path, copy_kernel):
    rt, dev = toy_runtime(tmp_path)
    x, h = rt.addresses.buffers["x"], rt.addresses.buffers["h"]
    dev.view(h, 512)[:] = 0xCD
    n = len(dev.calls)
    rt.run_sequence(OPS, graph=False, copy_kernel=copy_kernel)
    got = [c for c in dev.calls[n:] if c[0] in ("d2d", "launch", "copies")]
    assert _launch_names(got) == (_kernel_copies(STEPS) if copy_kernel else STEPS)
    assert (dev.view(x, 512) == 0xCD).all() and (dev.view(x + 768, 256) == 0xCD).all()
    if copy_kernel:
        rt.close()
        return
    assert dev.ops("capture") == []
    # the same steps as the individual calls, in the same order
    m = len(dev.calls)
    rt.copy("x", "h", {"tokens": 2})
    rt.run("step", {"tokens": 2}, graph=False)
    rt.copy("x", "h", {"tokens": 1}, dst_row=3)
    rt.run("step", {"tokens": 4}, graph=False)
    assert [c for c in dev.calls[m:] if c[0] in ("d2d", "launch")] == got
    rt.close()


@pytest.mark.parametrize("bad, match", [
    ((), "the sequence is empty"),
    ((Run.of("step", {"tokens": 1}), Run.of("nope", {"tokens": 1})), "unknown program `nope`"),
    ((Run.of("step", {"tokens": 1}), Run.of("step", {"tokens": 0})), "tokens"),
    ((Run.of("step", {"tokens": 1}), Copy.of("y", "x")), "copy into `y`: it is an output"),
    ((Run.of("step", {"tokens": 1}), Copy.of("x", "y")), "the dtypes differ"),
    ((Run.of("step", {"tokens": 1}), Copy.of("x", "h", {"tokens": 2}, dst_row=255)),
     "do not fit its 65536"),
])
@pytest.mark.parametrize("graph", [True, False])
def test_a_refused_op_queues_nothing(tmp_path, bad, match, graph):
    rt, dev = toy_runtime(tmp_path)
    n = len(dev.calls)
    with pytest.raises(CallerError, match=match):
        rt.run_sequence(bad, graph=graph)
    assert [c for c in dev.calls[n:] if c[0] in ("d2d", "launch", "graph", "capture")] == []
    rt.run_sequence(OPS, graph=graph)                      # still usable
    rt.close()


def test_consecutive_copies_share_one_launch_unless_they_overlap(tmp_path):
    """Two copies into disjoint rows of x from h: one launch; a third whose source is a
    destination of the group (x into h) starts a new launch."""
    rt, dev = toy_runtime(tmp_path)
    x, h = rt.addresses.buffers["x"], rt.addresses.buffers["h"]
    dev.view(h, 1024)[:] = 7
    ops = (Copy.of("x", "h", {"tokens": 1}), Copy.of("x", "h", {"tokens": 1}, dst_row=2),
           Run.of("step", {"tokens": 3}))
    rt.run_sequence(ops, copy_kernel=True)
    steps = list(rt._graphs.values())[-1].steps
    assert steps[0] == ("copies", ((x, h, 256), (x + 512, h, 256)),
                        "copy `h` into `x`; copy `h` into `x`")
    rt.run_sequence(ops, graph=False, copy_kernel=True)
    assert (dev.view(x, 256) == 7).all() and (dev.view(x + 512, 256) == 7).all()
    rt.close()


def test_copy_groups_split_on_overlap_size_and_runs():
    c = lambda d, s, n: ("copy", (d, s, n, "w"))     # noqa: E731
    run = ("run", "p", {})
    plans = [c(0, 100, 8), c(8, 100, 8), c(200, 0, 8), run, c(300, 400, 0), c(16, 116, 4)]
    got = copy_groups(plans)
    assert [g[0] for g in got] == ["copies", "copies", "run", "copy", "copies"]
    assert [len(g[1]) for g in got if g[0] == "copies"] == [2, 1, 1]
    many = copy_groups([c(16 * i, 1000 + 16 * i, 16) for i in range(MAX_GROUP + 1)])
    assert [len(g[1]) for g in many] == [MAX_GROUP, 1]
    # a destination overlapping an earlier destination also splits (order would matter)
    assert [len(g[1]) for g in copy_groups([c(0, 100, 8), c(4, 200, 8)])] == [1, 1]


def test_a_closed_runtime_refuses_a_sequence_it_replayed_before(tmp_path):
    rt, dev = toy_runtime(tmp_path)
    rt.run_sequence(OPS)
    rt.close()
    for graph in (True, False):
        with pytest.raises(CallerError, match="this runtime was closed"):
            rt.run_sequence(OPS, graph=graph)


def test_mailbox_loads_and_stores_are_copy_kernel_segments(tmp_path):
    """A Load takes a mailbox's bytes into an input, a Store puts a buffer's bytes into the
    mailbox; both are segments of the copy kernel, in the graph and eagerly."""
    rt, dev = toy_runtime(tmp_path)
    x, h = rt.addresses.buffers["x"], rt.addresses.buffers["h"]
    box = rt.mailbox(1024)
    box.array[:512] = 0xAB
    ops = (Load.of("x", box, 0, {"tokens": 2}), Run.of("step", {"tokens": 2}),
           Store.of(box, "h", 512, {"tokens": 2}))
    rt.run_sequence(ops, copy_kernel=True)
    steps = list(rt._graphs.values())[-1].steps
    assert steps[0] == ("copies", ((x, box.addr, 512),), "load mailbox bytes 0… into `x`")
    assert steps[-1] == ("copies", ((box.addr + 512, h, 512),),
                         "store `h` into mailbox bytes 512…")
    assert rt.graphs[-1].program == "[load+step+store]"
    rt.run_sequence(ops, graph=False, copy_kernel=True)
    assert (dev.view(x, 512) == 0xAB).all()
    assert box.array[512:].tobytes() == dev.view(h, 512).tobytes()
    assert box.view("<i8", 512, 2).tolist() == dev.view(h, 16).view("<i8").tolist()
    n = len(dev.calls)
    box.mark()
    box.wait()
    box.wait()                                        # nothing marked: returns at once
    assert [c[0] for c in dev.calls[n:]] == ["record", "wait event"]
    rt.close()


def test_mailbox_ops_are_checked_before_anything_is_queued(tmp_path):
    rt, dev = toy_runtime(tmp_path)
    box = rt.mailbox(600)
    stranger = toy_runtime(tmp_path / "other")[0].mailbox(600)
    bad = [
        ((Load.of("x", box, 0, {"tokens": 1}),), False, "run in the runtime's copy kernel"),
        ((Store.of(box, "h", 200, {"tokens": 2}),), True, "512 bytes at byte 200 are outside"),
        ((Load.of("x", box, 400, {"tokens": 1}),), True, "256 bytes at byte 400 are outside"),
        ((Load.of("y", box, 0, {"tokens": 1}),), True, "load into `y`: it is an output"),
        ((Load.of("x", stranger, 0, {"tokens": 1}),), True, "not one of this runtime's"),
    ]
    n = len(dev.calls)
    for ops, copy_kernel, match in bad:
        with pytest.raises(CallerError, match=match):
            rt.run_sequence((Run.of("step", {"tokens": 1}),) + ops, copy_kernel=copy_kernel)
    assert [c for c in dev.calls[n:] if c[0] in ("copies", "launch", "graph", "capture")] == []
    with pytest.raises(CallerError, match="outside its 600 bytes or misaligned"):
        box.view("<i8", 4)
    with pytest.raises(CallerError, match="at least one byte"):
        rt.mailbox(0)
    rt.close()
