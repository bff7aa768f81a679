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
    assert set(out) == {"input-grounded", "open-chat", "math-code"}
    for r in out.values():
        assert r["prompts"] == 2 and r["bugs"] == [] and r["identical"] == 2
        if r["rounds"]:
            assert r["tau"] >= 1 and 0 <= r["acceptance_rate"] <= 1
            assert len(r["acceptance"]) <= 5
    ids = prompt_ids(tok, limit=2)
    assert [len(v) for v in ids.values()] == [2, 2, 2]
    rep = Report()
    spec_set_rows(rep, out, None)
    assert [r.case for r in rep.rows].count("spec input-grounded") == 3
    assert any("τ" in r.what for r in rep.rows)


def test_dspark_spec_aggregates_both_sets_and_renders(tok):
    """The DSpark rows on the numpy DSpark stand-in: plain vs DSpark per prompt, the
    per-position acceptance and split aggregated, one GPU-event run per set (none here: the
    fake is no kern runtime, so its GPU split stays empty)."""
    from dspark_fakes import DSparkRuntime
    from kern_run.bench.dspark import dspark_rows, dspark_spec
    from kern_run.spec.dspark import DraftSpec
    from kern_run.spec.setup import SpecPlan
    rt = DSparkRuntime(vocab=49152, capacity=2048, max_tokens=1024, block=7, mask=3,
                       plan=lambda r, p: 2, seed=5, accepting=True)
    info = SimpleNamespace(max_tokens=1024, vocab=49152)
    plan = SpecPlan("dspark", 7, 16, draft=DraftSpec(7, 3), accept=True)
    out = dspark_spec(rt, info, tok, plan, steps=24, capacity=2048, limit=2)
    for r in out.values():
        assert r["prompts"] == 2 and r["bugs"] == [] and r["identical"] == 2
        # two drafts accepted per full round: 3 tokens a round but the shortened last one
        assert r["conditional"][:3] == [1.0, 1.0, 0.0] and 2.5 <= r["tau"] <= 3.0
        assert r["draft_ms_per_round"] > 0 and r["verify_ms_per_round"] > 0
        assert r["gpu"] == {"gpu_draft_ms_per_round": None, "gpu_verify_ms_per_round": None,
                            "gpu_precompute_ms_per_round": None}
        assert r["tau_before_eos"] is None or 1 <= r["tau_before_eos"] <= 8
        assert 0 <= r["after_eos_share"] <= 1
        e = r["to_eos"]              # the second pass, both runs stopping at EOS
        assert e["bugs"] == [] and e["plain_ms_per_token"] > 0 and e["spec_ms_per_token"] > 0
        assert 1 <= e["tau"] <= 8 and 0 < e["rounds"] <= r["rounds"]
        c = r["to_eos_unchained"]    # that pass reading the drafts before verify
        assert c["bugs"] == [] and (c["tau"], c["rounds"]) == (e["tau"], e["rounds"])
        n = r["to_eos_chained"]      # that pass without rounds queued ahead
        assert n["bugs"] == [] and (n["tau"], n["rounds"]) == (e["tau"], e["rounds"])
        a = r["to_eos_after"]        # and with the precompute launched after the wait
        assert a["bugs"] == [] and (a["tau"], a["rounds"]) == (e["tau"], e["rounds"])
        g = r["to_eos_graph_per_program"]   # pipelined, a graph per program
        assert g["bugs"] == [] and (g["tau"], g["rounds"]) == (e["tau"], e["rounds"])
    rep = Report()
    dspark_rows(rep, {**out, "_block": 7})
    assert [r.case for r in rep.rows].count("dspark open-chat") == 9
    assert [r.case for r in rep.rows].count("dspark math-code") == 9
    assert any("DSpark pipelined, a graph per program vs plain" in r.what for r in rep.rows)
    assert any("DSpark chained, not pipelined vs plain" in r.what for r in rep.rows)
    assert any("DSpark unchained vs plain" in r.what for r in rep.rows)
    assert any("DSpark, precompute after the wait vs plain" in r.what for r in rep.rows)
    # the 128-step rows ran the default (pipelined) loop: its host split is queue / wait
    assert all(r["pipelined"] for k, r in out.items() if not k.startswith("_"))
    assert any(r.what == "round ms: queue / wait / host (pipelined)" for r in rep.rows)
    assert any("to the first EOS" in r.what and "as kern-run does" in r.note for r in rep.rows)
    mc = next(r for r in rep.rows if r.case == "dspark math-code" and "ms/token" in r.what)
    assert mc.target == "≥ 1.6x" and mc.note.endswith(("met", "MISSED"))
    ig = next(r for r in rep.rows if r.case == "dspark input-grounded" and "ms/token" in r.what)
    assert ig.target == "" and not ig.note.endswith(("met", "MISSED"))
    assert any("τ" in r.what and "block 7" in r.note for r in rep.rows)


def test_before_eos_counts_the_rounds_that_start_before_the_first_stop():
    from kern_run.bench.dspark import before_eos
    from kern_run.spec.stats import SpecStats
    # token 0 from decode, then rounds of 3, 1, 4 and 2 tokens: they start at 1, 4, 5, 9
    toks = [5, 6, 7, 8, 9, 2, 6, 6, 6, 6, 6]
    st = SpecStats(round_log=[3, 1, 4, 2])
    assert st.anchors(0) == [0, 3, 4, 8]
    assert before_eos(toks, st, {2}) == (2, 4, 6)               # EOS at 5: the rounds at 1, 4
    assert before_eos(toks, st, {99}) == (4, 10, 0)             # no EOS: every round
    assert before_eos([2, 5, 5], SpecStats(round_log=[2]), {2}) == (0, 0, 3)  # EOS first
