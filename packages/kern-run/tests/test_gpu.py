"""End-to-end on a GPU with the bundled SmolLM2 example (skipped without a GPU, and while
``examples/smollm2-135m/`` is not there). Run on the GPU machine with ``pytest -m gpu``."""

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

    from kern_run.contract import check_manifest
    from kern_run.tokenizer import load_tokenizer
    b = defaults.bundled_default()
    vm = load(b.manifest)
    info = check_manifest(vm.manifest)
    tok = load_tokenizer(b.tokenizer)
    rt = Runtime.load(vm, b.kernels, weights=b.weights, capacity=4096, progress=None)
    yield rt, info, tok
    rt.close()


def _gen(loaded, text, **kw):
    from kern_run.generate import generate
    rt, info, tok = loaded
    return generate(rt, tok.encode(text), max_tokens=info.max_tokens, eos=tok.eos_ids,
                    vocab=info.vocab, **kw)


def test_paris(loaded):
    rt, info, tok = loaded
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
    tok = loaded[2]
    text = " ".join(PROMPTS) * 30  # several hundred tokens
    n = len(tok.encode(text))
    assert n > 300
    a = _gen(loaded, text, steps=300, chunk=128).tokens   # crosses many KV blocks
    b = _gen(loaded, text, steps=300, chunk=n).tokens
    assert a == b


def test_cli_default_runs(capsys):
    _example_or_skip()
    from kern_run.runner import RunOptions, run
    out = run(RunOptions(steps=8))
    assert out.text.startswith(" Paris")
