import numpy as np
import pytest

from kern_run.errors import KernRunError
from kern_run.generate import generate
from krun_fakes import FakeRuntime


def writes(rt, name):
    """What the host wrote into input ``name``, in order: ``write``'s arrays and the values of
    ``write_scalars`` (one-element lists)."""
    return [e[2].tolist() if e[0] == "write" else [e[1][name]] for e in rt.events
            if (e[0] == "write" and e[1] == name) or (e[0] == "write_scalars" and name in e[1])]


def test_order_of_calls_and_inputs():
    rt = FakeRuntime(script=[50, 51, 52, 53])
    prompt = [10, 11, 12, 13, 14, 15]  # n = 6: prefill 4 (full) + 1 (tail), decode at 5
    res = generate(rt, prompt, steps=3, chunk=4, max_tokens=8, eos={99})
    assert res.tokens == [50, 51, 52] and res.stop == "steps"
    assert [e for e in rt.events if e[0] == "capture"] == [
        ("capture", "prefill", {"tokens": 4}), ("capture", "decode", {"tokens": 1})]
    assert rt.runs() == [("run", "prefill", {"tokens": 4}, True),
                         ("run", "prefill", {"tokens": 1}, False),
                         ("run", "decode", {"tokens": 1}, True),
                         ("run", "decode", {"tokens": 1}, True),
                         ("run", "decode", {"tokens": 1}, True)]
    # the host writes the prompt's ids; each later decode gets the previous one's next_token
    # by a device copy
    assert writes(rt, "token_ids") == [[10, 11, 12, 13], [14], [15]]
    assert rt.fed == [15, 50, 51]
    assert writes(rt, "positions") == [[0, 1, 2, 3], [4], [5], [6], [7]]
    # one sequence: slot = position, kv_len = position + 1; pos0 only for host-written calls
    assert writes(rt, "slots") == [[0, 1, 2, 3], [4], [5], [6], [7]]
    assert writes(rt, "kv_lens") == [[1, 2, 3, 4], [5], [6], [7], [8]]
    assert writes(rt, "pos0") == [[0], [4], [5]]
    assert all(e[2].dtype == np.int32 for e in rt.events
               if e[0] == "write" and e[1] in ("pos0", "kv_lens"))
    # the identity table, written once for the most rows a call reads
    assert writes(rt, "block_table") == [[[0]] * 4]
    kinds = [e[0] for e in rt.events if e[0] != "capture"]
    # a fed step: the token copied on the device, its three positions as one store operation
    fed = ["copy", "write_scalars", "run", "read_async"]
    assert kinds == ["write"] + (["write"] * 5 + ["run"]) * 2 + ["sync"] + ["write"] * 5 + \
        ["run", "read_async"] + fed + ["wait"] + fed + ["wait", "wait"]
    assert res.decode_tokens == 2 and res.produced == 3


def test_the_next_step_is_queued_before_the_token_is_waited_for():
    """One step deep: at the i-th wait, decode i + 1 is already queued (until the limit)."""
    rt = FakeRuntime(fn=lambda pos: 40 + pos)
    generate(rt, [1, 2, 3], steps=6, chunk=2, max_tokens=8)
    runs_before_wait, runs = [], 0
    for e in rt.events:
        runs += e[0] == "run" and e[1] == "decode"
        if e[0] == "wait":
            runs_before_wait.append(runs)
    assert runs_before_wait == [2, 3, 4, 5, 6, 6]
    assert rt.fed == [3, 42, 43, 44, 45, 46]   # each step's input is the previous output


def test_stops_at_eos_and_excludes_it():
    rt = FakeRuntime(script=[7, 8, 2, 9])
    res = generate(rt, [1, 2], steps=10, chunk=4, max_tokens=8, eos={2})
    assert res.tokens == [7, 8] and res.stop == "eos" and res.eos_token == 2
    assert res.produced == 3
    # the step after the EOS was queued before the EOS was read (its token 9 is never used)
    assert rt.decodes == 4 and rt.fed == [2, 7, 8, 2]
    assert [e[2] for e in rt.events if e[0] == "wait"] == [7, 8, 2]


def test_eos_as_first_token():
    rt = FakeRuntime(script=[2])
    res = generate(rt, [5], steps=10, chunk=4, max_tokens=8, eos={2, 3})
    assert res.tokens == [] and res.stop == "eos"
    assert len(rt.runs()) == 2 and rt.events.count(("sync",)) == 0  # no prefill
    rt = FakeRuntime(script=[2])
    res = generate(rt, [5], steps=1, chunk=4, max_tokens=8, eos={2, 3})
    assert res.stop == "eos" and len(rt.runs()) == 1   # nothing queued past the step limit


def test_step_limit_counts_generated_tokens():
    rt = FakeRuntime(fn=lambda pos: 40 + pos)
    res = generate(rt, [1, 2, 3], steps=5, chunk=2, max_tokens=8, eos={2})
    assert res.tokens == [42, 43, 44, 45, 46] and res.stop == "steps"
    assert rt.decodes == 5


def test_streaming_callback_gets_each_token_once_in_order():
    rt = FakeRuntime(script=[4, 5, 6, 1])
    seen = []
    res = generate(rt, [9, 9, 9], steps=10, chunk=8, max_tokens=8, eos={1}, on_token=seen.append)
    assert seen == res.tokens == [4, 5, 6]


def test_eager_runs_no_graph_and_captures_nothing():
    rt = FakeRuntime(script=[4, 5, 6])
    generate(rt, list(range(10)), steps=3, chunk=4, max_tokens=8, eager=True)
    assert all(e[3] is False for e in rt.runs())
    assert not [e for e in rt.events if e[0] == "capture"]


def test_chunk_one_and_graph_and_eager_agree_on_a_deterministic_fake():
    fn = lambda pos: (pos * 7) % 50 + 3  # noqa: E731
    outs = []
    for kw in ({"chunk": 512}, {"chunk": 1}, {"chunk": 512, "eager": True}):
        rt = FakeRuntime(fn=fn)
        outs.append(generate(rt, list(range(20)), steps=8, max_tokens=16, **kw).tokens)
    assert outs[0] == outs[1] == outs[2]


def test_timing_fields():
    ticks = iter(range(100))
    rt = FakeRuntime(script=[4, 5, 6])
    res = generate(rt, [1, 2, 3], steps=3, chunk=8, max_tokens=8, clock=lambda: next(ticks))
    # t0=0, prefill done=1, first token=2, then 3, 4
    assert res.prefill_s == 1 and res.ttft_s == 2 and res.decode_s == 2
    assert res.decode_ms_per_token == 1000 and res.tokens_per_s == 1
    assert res.prefill_tokens == 2 and res.prefill_tokens_per_s == 2


def test_refusals():
    with pytest.raises(KernRunError, match="--steps"):
        generate(FakeRuntime(), [1], steps=0, chunk=4, max_tokens=8)
    with pytest.raises(KernRunError, match="--capacity"):
        generate(FakeRuntime(), [1] * 10, steps=10, chunk=4, max_tokens=8, capacity=16)
    rt = FakeRuntime()
    with pytest.raises(KernRunError, match="this model's context is 16"):
        generate(rt, [1] * 10, steps=7, chunk=4, max_tokens=8, capacity=16, fixed_context=True)
    assert rt.events == []  # refused before any call
    with pytest.raises(KernRunError, match="outside the model's vocabulary"):
        generate(FakeRuntime(script=[1]), [1, 200], steps=1, chunk=4, max_tokens=8, vocab=100)


def test_bench_loops_honour_the_kv_limit():
    from kern_run.bench import kern_decode, kern_prefill
    d = kern_decode(FakeRuntime(fn=lambda pos: 7), 8, steps=4, reps=2, vocab=100, capacity=20,
                    fixed=True)   # a 16-token prompt + 4 steps = 20
    assert len(d["samples_ms"]) == 2
    with pytest.raises(KernRunError, match="needs 21 positions; this model's context is 20"):
        kern_decode(FakeRuntime(fn=lambda pos: 7), 8, steps=5, reps=1, vocab=100, capacity=20,
                    fixed=True)
    p = kern_prefill(FakeRuntime(fn=lambda pos: 7), 8, 18, 1, 100, capacity=20, fixed=True)
    assert (p["tokens"], p["chunk"]) == (18, 8)
