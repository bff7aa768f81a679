"""--spec-check: divergence index and the plain run's logit gap there; stats helpers."""

import numpy as np
import pytest

from kern_run.generate import generate
from kern_run.spec import SpecStats, repetition_loop, spec_check, speedup
from kern_run.spec.check import first_divergence, logits_f32, top2
from spec_fakes import PEAK, TIE, KVModelRuntime

PROMPT = [5, 9, 2, 5, 9, 2, 7, 5, 9]
KW = dict(steps=60, chunk=4, max_tokens=16, k=7, ngram=(1, 3))


def test_identical_runs_report_no_divergence():
    rep = spec_check(KVModelRuntime(ties=4), PROMPT, **KW)
    assert rep.identical and not rep.bug and rep.spec.spec.rounds > 0
    assert rep.plain.tokens == rep.spec.tokens
    assert "identical" in rep.describe()


def test_a_near_tie_divergence_is_reported_with_its_small_gap():
    rt = KVModelRuntime(ties=3, verify_flip=True)
    rep = spec_check(rt, PROMPT, **KW)
    d = rep.divergence
    assert d is not None and not rep.bug
    assert rep.plain.tokens[:d.index] == rep.spec.tokens[:d.index]
    assert (d.top1, d.top2) == (d.plain_token, d.spec_token)
    assert d.gap == pytest.approx(TIE, abs=1e-5) and d.spec_gap == pytest.approx(TIE, abs=1e-5)
    assert d.replay_token == d.plain_token
    # the gap was read at the right step: the plain logits of that decode, recomputed
    plain = generate(KVModelRuntime(ties=3), PROMPT, steps=60, chunk=4, max_tokens=16)
    ref = KVModelRuntime(ties=3)
    generate(ref, PROMPT, steps=d.index + 1, chunk=4, max_tokens=16)
    assert int(np.argmax(ref.buffers["logits"][0])) == plain.tokens[d.index] == d.top1
    assert "near-tie" in rep.describe()


def test_a_wrong_verify_is_flagged_as_a_bug():
    rep = spec_check(KVModelRuntime(verify_bug=True), PROMPT, **KW)
    d = rep.divergence
    assert rep.bug and d.gap > PEAK - 1 and "BUG" in rep.describe()


def test_the_replay_stops_where_the_divergence_is():
    """The third run makes exactly index + 1 tokens, so the last decode is that step."""
    rt = KVModelRuntime(ties=3, verify_flip=True)
    rep = spec_check(rt, PROMPT, **KW)
    i = rep.divergence.index
    decodes_after_spec = [e for e in rt.events if e[0] == "run" and e[1] == "decode"][-(i + 1):]
    assert [e[4] for e in decodes_after_spec] == list(range(len(PROMPT) - 1,
                                                            len(PROMPT) + i))


def test_readers_and_helpers():
    bits = np.array([[0x3F80, 0x4000, 0xC040]], dtype=np.uint16)   # 1, 2, -3 in bf16
    assert logits_f32(bits).tolist() == [1.0, 2.0, -3.0]
    assert top2(np.array([1.0, 3.0, 3.0, 2.0], np.float32)) == (1, 2, 0.0)
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 4, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    # a runtime without `read`: the logits come through read_async
    rt = KVModelRuntime()
    generate(rt, [1, 2], steps=1, chunk=4, max_tokens=16)
    from kern_run.spec.check import read_logits
    assert read_logits(rt).shape == (64,)


def test_stats():
    s = SpecStats(k=3)
    s.record(3, 3, 4, 0.004)
    s.record(2, 1, 2, 0.002)
    s.record(3, 0, 1, 0.003)
    assert s.rounds == 3 and s.tau == 7 / 3
    assert s.drafted == [3, 3, 2] and s.accepted == [2, 1, 1]
    assert s.acceptance == [2 / 3, 1 / 3, 1 / 2] and s.acceptance_rate == 4 / 8
    assert s.ms_per_round == pytest.approx(3.0)
    assert s.host_us_per_round is None and len(s.lines()) == 3
    assert s.as_dict()["tau"] == 7 / 3
    assert speedup(0.9, 0.5) == pytest.approx(1.8) and speedup(None, 1.0) is None


def test_repetition_loop():
    rng = np.random.default_rng(0)
    free = rng.integers(0, 1000, 128).tolist()
    assert not repetition_loop(free)
    assert repetition_loop(free[:40] + [7, 8, 9] * 12)            # period 3, 36 tokens
    assert not repetition_loop(free[:40] + [7, 8, 9] * 8)         # 24 < 32 tokens
    assert repetition_loop([4] * 40)
    assert repetition_loop(free[:20] + free[20:40] * 2 + free[:5], min_span=32)  # period 20
