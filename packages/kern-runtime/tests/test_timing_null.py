"""kern_runtime.timing on the null device: events are recorded on the runtime's stream,
elapsed between two records, released by close; a non-runtime is refused."""

from __future__ import annotations

import pytest

import krt_manifests as gm
from krt_null import load_null
from kern_runtime import CallerError
from kern_runtime.timing import timing_event
from test_runtime_null import features_files


def test_events_bracket_queued_work(tmp_path):
    m, k, w = features_files(tmp_path)
    rt, dev = load_null(m, k, w, capacity=gm.CAPACITY)
    try:
        a, b = timing_event(rt), timing_event(rt)
        assert [c for c in dev.calls if c[0] == "event"][-2:] == [("event", True)] * 2
        a.record()
        rt.run("main", {"tokens": 4}, graph=False)
        b.record()
        # null time: the device calls logged from one record to the next (the run's launches)
        i, j = [i for i, c in enumerate(dev.calls) if c[0] == "record"][-2:]
        assert b.elapsed_ms(a) == j - i > 1
        assert any(c[0] == "launch" for c in dev.calls[i:j]), dev.calls[i:j]
        a.close(), b.close(), a.close()
        assert [c[0] for c in dev.calls].count("destroy event") >= 2
    finally:
        rt.close()
    with pytest.raises(CallerError, match="loaded kern_runtime.Runtime"):
        timing_event(object())
