"""``kern-run bench --spec``'s kern side on the numpy KV stand-in runtime: both prompt sets
run plain and speculative, the aggregates are consistent, and the table rows render."""

from types import SimpleNamespace

import pytest

from kern_run.bench import Report, spec_set_rows
from kern_run.bench.spec import kern_spec, prompt_ids
from kern_run.defaults import gguf_path
from kern_run.errors import KernRunError
from spec_fakes import KVModelRuntime


@pytest.fixture
def tok():
    from kern_run.tokenizer import load_tokenizer
    try:
        return load_tokenizer(gguf_path())
    except KernRunError as err:
        pytest.skip(str(err))


def test_kern_spec_aggregates_both_sets(tok):
    rt = KVModelRuntime(vocab=49152, capacity=2048, max_tokens=1024, model="copy", seed=5)
    info = SimpleNamespace(max_tokens=1024, vocab=49152)
    out = kern_spec(rt, info, tok, steps=24, k=5, ngram=(2, 4), capacity=2048, fixed=False,
                    verify_max=16, limit=2)
    assert set(out) == {"input-grounded", "open-chat"}
    for r in out.values():
        assert r["prompts"] == 2 and r["bugs"] == [] and r["identical"] == 2
        if r["rounds"]:
            assert r["tau"] >= 1 and 0 <= r["acceptance_rate"] <= 1
            assert len(r["acceptance"]) <= 5
    ids = prompt_ids(tok, limit=2)
    assert [len(v) for v in ids.values()] == [2, 2]
    rep = Report()
    spec_set_rows(rep, out, None)
    assert [r.case for r in rep.rows].count("spec input-grounded") == 3
    assert any("τ" in r.what for r in rep.rows)
