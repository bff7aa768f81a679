"""The DSpark loop's plain tail takes its fed steps through the runtime's mailboxes
(kern_run.fed), as ``generate`` does: the same tokens as by stream operations and as plain
greedy, each fed step one captured sequence."""

from __future__ import annotations

import pytest

from kern_run.spec.dspark import DraftSpec, dspark_generate
from dspark_fakes import DSparkRuntime
from spec_fakes import Mailboxes
from test_spec_dspark import MASK, VOCAB, plain_run, same


class MailboxDSparkRuntime(Mailboxes, DSparkRuntime):
    """:class:`DSparkRuntime` with mailboxes."""


def run(rt, prompt, **kw):
    return dspark_generate(rt, prompt, max_tokens=16, draft=DraftSpec(7, MASK), **kw)


def sequences(rt) -> int:
    return sum(e[0] == "sequence" for e in rt.events)


@pytest.mark.parametrize("pipeline", [False, True])
def test_capacity_tail_goes_through_the_mailboxes(pipeline):
    prompt, steps = [1, 2, 3, 4], 20
    cap = len(prompt) + steps        # the rounds stop at anchor 20: a tail of 3 plain steps
    kw = dict(steps=steps, chunk=4, capacity=cap, pipeline=pipeline)
    make = dict(block=7, mask=MASK, vocab=VOCAB, capacity=cap, accepting=pipeline)
    boxed_rt, ops_rt = MailboxDSparkRuntime(**make), DSparkRuntime(**make)
    boxed, ops = run(boxed_rt, prompt, **kw), run(ops_rt, prompt, **kw)
    same(boxed, ops)
    same(boxed, plain_run(prompt, steps=steps, chunk=4, capacity=cap))
    assert boxed.spec.decode_steps == ops.spec.decode_steps == 3
    assert "pass the capacity 24" in boxed.spec.tail_reason
    # the tail's first step runs from the host-known anchor; the two after it are fed
    assert sequences(boxed_rt) - sequences(ops_rt) == 2 and not boxed_rt.uncaptured
    assert len(boxed_rt.boxes) == 2 and len(boxed_rt.captured_sequences) >= 2
    assert [c.pos0 for c in boxed.calls if c.program == "decode"] == [20, 21, 22]
    assert boxed.calls == ops.calls
    if not pipeline:                 # (pipelined, the fed rounds are sequences too)
        assert sequences(ops_rt) == 0


def test_no_tail_no_mailboxes_and_eager_takes_none():
    prompt = [5, 6, 7]
    rt = MailboxDSparkRuntime(block=7, mask=MASK, vocab=VOCAB)
    same(run(rt, prompt, steps=1, chunk=4), plain_run(prompt, steps=1, chunk=4))
    assert rt.boxes == []                  # one step: the prompt's decode_spec makes it
    rt = MailboxDSparkRuntime(block=7, mask=MASK, vocab=VOCAB, capacity=12)
    res = run(rt, prompt, steps=9, chunk=4, capacity=12, eager=True)
    same(res, plain_run(prompt, steps=9, chunk=4, capacity=12))
    assert rt.boxes == [] and sequences(rt) == 0


def test_mailboxes_off_keeps_the_stream_operations():
    prompt, cap = [1, 2, 3, 4], 24
    rt = MailboxDSparkRuntime(block=7, mask=MASK, vocab=VOCAB, capacity=cap)
    res = run(rt, prompt, steps=20, chunk=4, capacity=cap, mailboxes=False)
    same(res, plain_run(prompt, steps=20, chunk=4, capacity=cap))
    assert rt.boxes == [] and sequences(rt) == 0
