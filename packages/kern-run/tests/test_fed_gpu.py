"""Fed decode steps through mailboxes (:mod:`kern_run.fed`, the generation loop's default) on
a GPU: step by step the same logits, to the bit, as the stream operations' way (a token copy,
the positions as one store operation, a read), and the same tokens from :func:`generate`.

The SmolLM2 example on seeded random weights of its shape (``kern-run bench
--random-weights``; no GGUF; made by transformers in a child process on first use). Random
weights tend to repeat one greedy token, so the tokens alone would not show a stale input
token or position: the logits, which depend on both (the embedding row, the rope angles, the
keys attended), are what is compared; the test also asserts that they change step to step.

The prompt runs as the generation loop runs it: a prefill of all but its last token (the
prefill program writes the cache only: no ``logits``, no ``next_token``), then a decode of
the last token, whose ``next_token`` the first fed step takes. (Session 33's first run of
this test started the fed steps right after a prefill of the whole prompt, so its first
step took a stale ``next_token``: the previous pass's, or the fresh buffer's; that made a
fresh runtime's first pass differ from every later one, with the mailboxes or without.)"""

from __future__ import annotations

import numpy as np
import pytest

from kern_manifest.contract import (DECODE, KV_LENS, LOGITS, NEXT_TOKEN, POSITIONS, PREFILL,
                                    SLOTS, SYMBOL, TOKEN_IDS)

pytestmark = pytest.mark.gpu

ONE = {SYMBOL: 1}
PROMPT = [(17 * i + 5) % 49152 for i in range(16)]
STEPS = 24


@pytest.fixture(scope="module")
def loaded():
    from kern_manifest import read
    from kern_manifest.contract import check_manifest
    from kern_runtime import Runtime
    from kern_run.bench.random_weights import random_smollm2
    from kern_run.capacity import choose
    b = random_smollm2()
    info = check_manifest(read(b.manifest))
    cap = choose(None, info)
    with Runtime.load(b.manifest, b.kernels, weights=b.weights, capacity=cap.load,
                      progress=None) as rt:
        yield rt, info


def _prefill(rt) -> None:
    """The prompt up to its first generated token (``next_token``), as ``generate`` runs it."""
    from kern_run.inputs import write_at
    n = len(PROMPT) - 1
    write_at(rt, PROMPT[:n], 0)
    rt.run(PREFILL, {SYMBOL: n}, graph=False)
    write_at(rt, PROMPT[n:], n)
    rt.run(DECODE, ONE, graph=False)


def _by_stream_operations(rt) -> tuple[list[int], list[np.ndarray]]:
    _prefill(rt)
    tokens, logits = [], []
    for i in range(STEPS):
        pos = len(PROMPT) + i
        rt.copy(TOKEN_IDS, NEXT_TOKEN, ONE)
        rt.write_scalars({POSITIONS: pos, SLOTS: pos, KV_LENS: pos + 1})
        rt.run(DECODE, ONE)
        tokens.append(int(rt.read(NEXT_TOKEN, ONE)[0]))
        logits.append(rt.read(LOGITS, ONE).copy())
    return tokens, logits


def _through_mailboxes(rt) -> tuple[list[int], list[np.ndarray], list[int]]:
    from kern_run.fed import MailboxFeed
    feed = MailboxFeed.of(rt)
    feed.capture()
    _prefill(rt)
    tokens, logits, fed = [], [], []
    for i in range(STEPS):
        tokens.append(int(feed.queue(len(PROMPT) + i).wait()[0]))
        logits.append(rt.read(LOGITS, ONE).copy())
        fed.append(int(rt.read(TOKEN_IDS, ONE)[0]))
    return tokens, logits, fed


def test_mailbox_steps_give_the_same_logits_bit_for_bit(loaded):
    rt, _ = loaded
    want_tokens, want = _by_stream_operations(rt)
    tokens, got, fed = _through_mailboxes(rt)
    assert tokens == want_tokens
    # each step's input token is the previous step's output (the prefill's for the first)
    _prefill(rt)
    assert fed == [int(rt.read(NEXT_TOKEN, ONE)[0])] + tokens[:-1]
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.tobytes() == w.tobytes(), f"step {i}: logits differ"
    # not vacuous: the logits move with the position and the cache
    assert sum(not np.array_equal(want[i], want[i + 1]) for i in range(STEPS - 1)) >= STEPS - 2


def test_generate_with_and_without_mailboxes(loaded):
    from kern_run.generate import generate
    rt, info = loaded
    kw = dict(steps=STEPS, chunk=info.max_tokens, max_tokens=info.max_tokens, vocab=info.vocab)
    boxed = generate(rt, PROMPT, **kw)
    ops = generate(rt, PROMPT, mailboxes=False, **kw)
    again = generate(rt, PROMPT, **kw)          # the runtime's feed reused
    assert boxed.tokens == ops.tokens == again.tokens and len(boxed.tokens) == STEPS


def test_spec_generate_with_and_without_mailboxes(loaded):
    """The n-gram loop's plain steps through the mailboxes: the same tokens, rounds and
    acceptances as by stream operations (the same programs in the same order; only the
    feed differs). Random weights repeat few tokens, so the n-gram index matches and verify
    rounds run between the plain steps."""
    from kern_run.spec import spec_generate
    rt, info = loaded
    kw = dict(steps=48, chunk=info.max_tokens, max_tokens=info.max_tokens, vocab=info.vocab,
              k=5)
    boxed = spec_generate(rt, PROMPT, **kw)
    ops = spec_generate(rt, PROMPT, mailboxes=False, **kw)
    assert boxed.tokens == ops.tokens and len(boxed.tokens) == 48
    assert boxed.spec.accepted == ops.spec.accepted
    assert boxed.spec.rounds > 0, "no verify round ran"
