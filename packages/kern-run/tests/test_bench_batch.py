"""``kern-run bench --batch``'s logic on the fake paged runtime (the GPU run is the same code
over a loaded Runtime)."""

from __future__ import annotations

import pytest

from kern_run.bench import Report
from kern_run.bench import batch as B
from kern_run.engine import EngineConfig, FakePagedRuntime

VOCAB = 40


def setup(pages: int = 64, tokens_max: int = 16):
    rt = FakePagedRuntime(16 * pages, max_tokens=tokens_max, vocab=VOCAB, plain=True)
    cfg = EngineConfig(capacity=16 * pages, max_seqs=tokens_max, chunk=8, vocab=VOCAB,
                       max_tokens=tokens_max)
    return rt, cfg


def test_measure_engine_equals_plain_at_every_concurrency():
    rt, cfg = setup()
    prompts = B.id_prompts(6, 20, VOCAB)
    data = B.measure(rt, cfg, prompts, steps=10, concurrency=(1, 4, 16), check=True)
    assert data["plain"]["tokens"] == 60
    rows = data["engine"]
    assert [r["concurrency"] for r in rows] == [1, 4, 16]
    assert [r["in_flight"] for r in rows] == [1, 4, 6]          # 6 prompts in all
    for r in rows:
        assert r["tokens"] == 60 and r["divergences"] == {}
        assert r["seconds"] > 0 and r["step_ms"]
    assert set(rows[0]["step_ms"]) == {1}                        # one at a time: decode only
    assert max(rows[1]["step_ms"]) == 4
    rep = Report()
    B.batch_rows(rep, "batch fake", data)
    table = rep.table()
    assert "engine c=16 (at most 6) output tok/s" in table
    assert "identical 6/6" in table


def test_the_plain_baseline_may_cover_the_first_prompts_only():
    rt, cfg = setup()
    prompts = B.id_prompts(5, 7, VOCAB)
    data = B.measure(rt, cfg, prompts, steps=4, concurrency=(4,), check=True,
                     plain_prompts=2)
    assert (data["plain_prompts"], data["plain"]["tokens"]) == (2, 8)
    r = data["engine"][0]
    assert r["tokens"] == 20 and r["divergences"] == {}
    rep = Report()
    B.batch_rows(rep, "b", data)
    assert "plain batch-1 (2 prompts x 4 tokens)" in rep.table()
    assert "identical 2/2" in rep.table()
    data = B.measure(rt, cfg, prompts, steps=4, concurrency=(1, 2), per_concurrency=2)
    assert [(r["requests"], r["tokens"]) for r in data["engine"]] == [(2, 8), (4, 16)]


def test_a_divergence_is_reported_with_its_first_index(monkeypatch):
    rt, cfg = setup()
    prompts = B.id_prompts(3, 5, VOCAB)
    real = B.plain_runs

    def off(*a, **k):
        outs, secs = real(*a, **k)
        outs[2] = outs[2][:3] + [(outs[2][3] + 1) % VOCAB] + outs[2][4:]
        return outs, secs
    monkeypatch.setattr(B, "plain_runs", off)
    data = B.measure(rt, cfg, prompts, steps=6, concurrency=(4,), check=True)
    assert data["engine"][0]["divergences"] == {2: 3}
    # the plain run's top-1/top-2 gap where it chose token 3 (the fake's logits: the
    # token at 2, the rest below 1)
    gap = data["engine"][0]["gaps"][2]
    assert 1.0 < gap <= 2.0
    rep = Report()
    B.batch_rows(rep, "b", data)
    assert f"identical 2/3; first differing index (plain gap) #2@3 ({gap:.3f})" in rep.table()


def test_qwen3_batch_needs_its_manifest_and_id_prompts(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from kern_run import runner
    from kern_run.cli import app
    monkeypatch.setattr(runner, "probe_gpu", lambda: (True, ""))
    r = CliRunner().invoke(app, ["bench", "--batch", "--qwen3", str(tmp_path)])
    assert r.exit_code == 2 and "no manifest.json there" in r.stderr
    (tmp_path / "manifest.json").write_text("{}")
    r = CliRunner().invoke(app, ["bench", "--batch", "--qwen3", str(tmp_path)])
    assert r.exit_code == 2 and "give --prompt-source ids" in r.stderr


def test_in_flight_is_bounded_by_the_pool():
    _, cfg = setup(pages=10)
    # a prompt of 20 + 12 tokens reserves 31 slots = 2 pages; 9 usable pages hold 4
    assert B.in_flight_limit(cfg, 64, 20, 12, 100) == 4
    assert B.in_flight_limit(cfg, 2, 20, 12, 100) == 2
    assert B.in_flight_limit(cfg, 64, 1, 1, 100) == 9


@pytest.mark.parametrize("a, b, first", [([1, 2, 3], [1, 2, 3], None), ([1, 2, 3], [1, 5, 3], 1),
                                         ([1, 2], [1, 2, 3], 2), ([], [4], 0)])
def test_first_difference(a, b, first):
    assert B.first_difference(a, b) == first


def test_text_prompts_have_the_length_asked():
    from kern_run.spec import load_prompt_sets
    texts = [p.text for ps in load_prompt_sets().values() for p in ps]

    class Tok:
        def encode(self, text):
            return [ord(c) for c in text[:30]]            # ≤ 30 tokens a text: joins several
    out = B.text_prompts(Tok(), 5, 120)
    assert [len(p) for p in out] == [120] * 5
    for i, p in enumerate(out):
        assert p[:len(Tok().encode(texts[i]))] == Tok().encode(texts[i])


def test_id_prompts_are_distinct_and_in_the_vocabulary():
    out = B.id_prompts(8, 30, VOCAB)
    assert len({tuple(p) for p in out}) == 8
    assert all(0 <= t < VOCAB for p in out for t in p)


def test_cli_batch_refuses_bad_options_before_the_gpu(monkeypatch):
    from typer.testing import CliRunner

    from kern_run import runner
    from kern_run.cli import app
    probed = []
    monkeypatch.setattr(runner, "probe_gpu", lambda: probed.append(1) or (False, "none"))
    r = CliRunner().invoke(app, ["bench", "--batch", "--prompt-len", "0",
                                 "--concurrency", "4", "--concurrency", "0"])
    assert r.exit_code == 2
    assert "--prompt-len must be at least 1" in r.stderr
    assert "--concurrency must be at least 1 (got 0)" in r.stderr
    assert probed == []
    r = CliRunner().invoke(app, ["bench", "--batch"])
    assert r.exit_code == 1 and "no usable GPU" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
