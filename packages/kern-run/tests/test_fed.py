"""The generation loop's fed steps through mailboxes (:mod:`kern_run.fed`), on the KV model
fake: the same tokens as the copies' way, one sequence per fed step with nothing else queued
between the steps, both sequences captured before the clock."""

from __future__ import annotations

import pytest

from kern_run.errors import KernRunError
from kern_run.fed import MailboxFeed
from kern_run.generate import generate
from spec_fakes import KVModelRuntime, MailboxKVRuntime

VOCAB = 64


@pytest.mark.parametrize("model, prompt, steps, eager", [
    ("random", [3, 1, 4, 1, 5], 40, False),
    ("copy", [7, 7, 2, 9, 7, 7, 2], 60, False),
    ("random", [2] * 20, 25, True),
    ("random", [5], 1, False),
])
def test_mailbox_steps_make_the_same_tokens_as_the_copies(model, prompt, steps, eager):
    kw = dict(model=model, vocab=VOCAB, seed=len(prompt))
    plain = generate(KVModelRuntime(**kw), prompt, steps=steps, chunk=4, max_tokens=16,
                     eager=eager)
    rt = MailboxKVRuntime(**kw)
    boxed = generate(rt, prompt, steps=steps, chunk=4, max_tokens=16, eager=eager,
                     mailboxes=True)
    assert boxed.tokens == plain.tokens and len(boxed.tokens) == steps
    assert rt.uncaptured == []            # graphs only of captured keys (eager: none used)
    fed = sum(e == ("sequence", 6) for e in rt.events)
    assert fed == steps - 1                # the first token is the prompt's decode


def test_between_two_fed_steps_only_the_mailboxes_are_touched():
    rt = MailboxKVRuntime(model="random", vocab=VOCAB)
    generate(rt, [1, 2, 3], steps=8, chunk=4, max_tokens=16, mailboxes=True)
    kinds = [e[0] for e in rt.events]
    # both sequences captured before anything runs
    assert kinds.index("capture_sequence") < kinds.index("run")
    assert rt.captured_sequences and len(rt.captured_sequences) == 2
    first = kinds.index("sequence")
    # (the fake replays a sequence's Copy and Run ops as its copy and run events)
    after = [e for e in rt.events[first:] if e[0] not in ("run", "copy")]
    assert {e[0] for e in after} <= {"sequence", "mark", "box_wait", "wait"}
    assert sum(e[0] == "copy" for e in rt.events[first:]) == kinds.count("sequence")
    # the mailboxes in turn: each step marks the other one
    assert [e[1] for e in after if e[0] == "mark"] == [0, 1] * 3 + [0]


def test_generations_on_one_runtime_share_its_boxes_and_graphs():
    rt = MailboxKVRuntime(model="random", vocab=VOCAB)
    first = generate(rt, [1, 2, 3], steps=6, chunk=4, max_tokens=16)
    captured = len(rt.captured_sequences)
    # the first generation stops on EOS with a step still queued: the next one waits for it
    eos = generate(rt, [4, 5], steps=6, chunk=4, max_tokens=16, eos={first.tokens[2]})
    again = generate(rt, [1, 2, 3], steps=6, chunk=4, max_tokens=16)
    assert len(rt.boxes) == 2 and len(rt.captured_sequences) == captured == 2
    assert MailboxFeed.of(rt) is MailboxFeed.of(rt)
    assert again.tokens == first.tokens
    fresh = generate(MailboxKVRuntime(model="random", vocab=VOCAB), [4, 5], steps=6, chunk=4,
                     max_tokens=16, eos={first.tokens[2]})
    assert eos.tokens == fresh.tokens and eos.stop == fresh.stop


def test_a_box_is_read_out_before_it_is_written_again():
    rt = MailboxKVRuntime(model="random", vocab=VOCAB)
    generate(rt, [1, 2], steps=1, chunk=4, max_tokens=16)   # loads the state
    feed = MailboxFeed(rt)
    feed.capture()
    first = feed.queue(2)
    feed.queue(3)
    token = int(rt.boxes[-2].view("<i8", 24)[0])
    feed.queue(4)                         # box 0 again: step 2's token is copied out first
    assert int(first.wait()[0]) == token
    with pytest.raises(KernRunError, match="does not fit the contract's i32"):
        feed.queue(2**31 - 1)


def test_mailboxes_are_the_default_and_can_be_turned_off():
    rt = MailboxKVRuntime(model="random", vocab=VOCAB)
    res = generate(rt, [1, 2, 3], steps=5, chunk=4, max_tokens=16)
    assert len(rt.boxes) == 2 and sum(e[0] == "sequence" for e in rt.events) == 4
    off = MailboxKVRuntime(model="random", vocab=VOCAB)
    ops = generate(off, [1, 2, 3], steps=5, chunk=4, max_tokens=16, mailboxes=False)
    assert off.boxes == [] and not any(e[0] == "sequence" for e in off.events)
    assert res.tokens == ops.tokens


def test_a_runtime_without_mailboxes_feeds_by_stream_operations():
    rt = KVModelRuntime(model="random", vocab=VOCAB)
    assert not hasattr(rt, "mailbox")
    res = generate(rt, [1, 2, 3], steps=5, chunk=4, max_tokens=16)
    assert len(res.tokens) == 5
