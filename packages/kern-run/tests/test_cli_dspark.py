"""``kern-run --spec [dspark]`` through the runner and the CLI on a DSpark bundle on disk
(dspark_fakes.write_bundle) and the numpy DSpark stand-in: the drafter picked, output equal
to plain greedy, --spec-check, the draft file joining the weights, and every refusal of the
DSpark files as one line naming the file and key or tensor."""

import io
import json

import pytest
from typer.testing import CliRunner

from kern_run import runner
from kern_run.cli import app, bare_spec
from kern_run.defaults import gguf_path
from kern_run.errors import KernRunError
from dspark_fakes import DSparkRuntime, dspark_config, write_bundle

cli = CliRunner()
VOCAB = 49152
PROMPT = "one two three one two three one two"


@pytest.fixture
def gguf():
    try:
        return gguf_path()
    except KernRunError as err:
        pytest.skip(str(err))


def _run(d, gguf, plan=None, accepting=False, **kw):
    m = d / "manifest.json"
    w = d / "target.safetensors"
    w.write_bytes(b"")
    fake = DSparkRuntime(vocab=VOCAB, capacity=4096, max_tokens=16, block=7, mask=3,
                         plan=plan, seed=3, accepting=accepting)
    seen = {}

    def factory(vm, kernels, **k):
        seen.update(k)
        return fake
    out, err = io.StringIO(), io.StringIO()
    opts = runner.RunOptions(manifest=m, weights=[w], tokenizer=gguf, capacity=4096,
                             prompt=PROMPT, **kw)
    res = runner.run(opts, out=out, err=err, runtime_factory=factory)
    return res, out.getvalue(), err.getvalue(), seen, fake


def test_bare_spec_picks_dspark_and_equals_plain_greedy(tmp_path, gguf):
    write_bundle(tmp_path, VOCAB)
    plain, pout, _, _, _ = _run(tmp_path, gguf, steps=40)
    spec, sout, serr, seen, fake = _run(tmp_path, gguf, plan=lambda r, p: 3, steps=40,
                                        spec="auto")
    assert spec.result.tokens == plain.result.tokens and sout == pout
    assert fake.runs("draft") and spec.result.spec.rounds > 0
    assert "spec dspark" in serr and "DSpark:" in serr and "acceptance per draft position" in serr
    # the draft file beside the manifest joined the target's weights
    assert seen["weights"] == [tmp_path / "target.safetensors", tmp_path / "draft.safetensors"]


def test_a_manifest_with_in_graph_acceptance_runs_pipelined_rounds(tmp_path, gguf):
    write_bundle(tmp_path, VOCAB, accept_mask=3)
    plain, pout, _, _, _ = _run(tmp_path, gguf, steps=40)
    spec, sout, serr, _, fake = _run(tmp_path, gguf, plan=lambda r, p: 3, steps=40,
                                     spec="auto", accepting=True)
    assert spec.result.tokens == plain.result.tokens and sout == pout
    st = spec.result.spec
    assert st.pipelined and st.queued_ahead > 0 and "rounds queued ahead" in serr
    assert ("copy", "positions", "next.positions") in fake.events


def test_a_dspark_json_whose_mask_differs_from_the_acceptance_step_is_refused(tmp_path, gguf):
    write_bundle(tmp_path, VOCAB, accept_mask=5)
    with pytest.raises(KernRunError) as ei:
        _run(tmp_path, gguf, steps=8, spec="auto", accepting=True)
    [p] = ei.value.problems
    assert p.startswith(f"`{tmp_path / 'dspark.json'}`: `mask_token_id` is 3; the manifest's "
                        f"in-graph acceptance (the last dispatch of `verify`) writes mask "
                        f"token 5")


def test_spec_ngram_on_a_dspark_manifest_uses_prompt_lookup(tmp_path, gguf):
    write_bundle(tmp_path, VOCAB)
    plain, *_ = _run(tmp_path, gguf, steps=40)
    spec, _, serr, seen, fake = _run(tmp_path, gguf, steps=40, spec="ngram")
    assert spec.result.tokens == plain.result.tokens
    assert not fake.runs("draft") and "spec ngram" in serr
    assert seen["weights"] == [tmp_path / "target.safetensors"]


def test_spec_check_with_dspark(tmp_path, gguf):
    write_bundle(tmp_path, VOCAB)
    _, _, err, _, _ = _run(tmp_path, gguf, steps=30, spec="dspark", spec_check=True)
    assert "spec-check: identical to plain greedy over" in err and "DSpark:" in err


def test_spec_k_bounds_the_drafts_per_round(tmp_path, gguf):
    write_bundle(tmp_path, VOCAB)
    res, _, _, _, fake = _run(tmp_path, gguf, steps=30, spec="dspark", spec_k=3)
    assert {e[2]["tokens"] for e in fake.runs("verify")} <= {2, 3, 4}
    with pytest.raises(KernRunError, match=r"1 ≤ --spec-k ≤ 7"):
        _run(tmp_path, gguf, steps=30, spec="dspark", spec_k=8)


@pytest.mark.parametrize("over,msg", [
    ({"format": "x"}, "`format` is 'x'; expected 'kern-dspark'"),
    ({"block": 0}, "`block` must be an integer ≥ 1 (got 0)"),
    ({"block": 16}, "a round verifies block + 1 = 17 tokens and `verify` takes at most 16"),
    ({"block": 5}, "`block` is 5; the manifest's `draft_tokens` has 7 rows"),
    ({"mask_token_id": VOCAB}, f"`mask_token_id` {VOCAB} is outside the manifest's vocabulary"),
    ({"layers": 2}, "`layers` is 2; the manifest declares 1 draft layers"),
    ({"markov_rank": 8}, "`markov_rank` is 8; the manifest's `draft.markov_w1.weight` is "
                         "[49152, 4]"),
    ({"tap_layers": [1, 2]}, "`tap_layers` must be a list of 5 integers"),
    ({"tap_layers": [1, 2, 3, 4, 30]}, "`tap_layers` [1, 2, 3, 4, 30] must lie in 0 … "
                                       "target_layers − 1 = 29"),
    ({"family": "gpt2"}, "`family` is 'gpt2'"),
])
def test_a_bad_dspark_json_names_the_file_and_key(tmp_path, gguf, over, msg):
    write_bundle(tmp_path, VOCAB, config=dspark_config(**over))
    with pytest.raises(KernRunError) as ei:
        _run(tmp_path, gguf, steps=8, spec="auto")
    ps = ei.value.problems
    assert all(p.startswith(f"`{tmp_path / 'dspark.json'}`: ") for p in ps)
    assert any(msg in p for p in ps) and len(ps) <= 2   # block 16: also not the manifest's 7


@pytest.mark.parametrize("tensors,msg", [
    ({"draft.norm.weight": [8]}, "no tensor `draft.markov_w1.weight` (the manifest declares "
                                 "bf16[49152, 4])"),
    ({"draft.norm.weight": [9], "draft.markov_w1.weight": [VOCAB, 4]},
     "tensor `draft.norm.weight` is bf16[9]; the manifest declares bf16[8]"),
    ({"draft.norm.weight": [8], "draft.markov_w1.weight": [VOCAB, 4],
      "draft.layers.1.input_layernorm.weight": [8]},
     "tensor `draft.layers.1.input_layernorm.weight` is not a `draft.*` weight of the manifest"),
])
def test_a_bad_draft_file_names_the_file_and_tensor(tmp_path, gguf, tensors, msg):
    write_bundle(tmp_path, VOCAB, draft=tensors)
    with pytest.raises(KernRunError) as ei:
        _run(tmp_path, gguf, steps=8, spec="dspark")
    [p] = ei.value.problems
    assert p.startswith(f"draft weights `{tmp_path / 'draft.safetensors'}`: ") and msg in p


def test_missing_dspark_files_and_unreadable_json(tmp_path, gguf):
    write_bundle(tmp_path, VOCAB)
    (tmp_path / "draft.safetensors").unlink()
    with pytest.raises(KernRunError, match="needs `.*draft.safetensors` beside it"):
        _run(tmp_path, gguf, steps=8, spec="auto")
    write_bundle(tmp_path, VOCAB)
    (tmp_path / "dspark.json").write_text("{")
    with pytest.raises(KernRunError, match="dspark.json`: not JSON"):
        _run(tmp_path, gguf, steps=8, spec="auto")


def test_bare_spec_argv():
    assert bare_spec(["--spec"]) == ["--spec=auto"]
    assert bare_spec(["--spec", "--steps", "4"]) == ["--spec=auto", "--steps", "4"]
    assert bare_spec(["--spec", "dspark"]) == ["--spec", "dspark"]
    assert bare_spec(["--prompt", "--spec"]) == ["--prompt", "--spec=auto"]
    assert bare_spec(["bench", "--spec"]) == ["bench", "--spec"]


def test_cli_spec_dspark_on_a_plain_manifest_is_one_line_exit_2(tmp_path, gguf):
    from krun_fakes import contract_manifest
    m = tmp_path / "manifest.json"
    m.write_text(json.dumps(contract_manifest(max_tokens=16, vocab=VOCAB, verify=True)))
    (tmp_path / "kernels").mkdir()
    w = tmp_path / "w.safetensors"
    w.write_bytes(b"")
    base = ["--manifest", str(m), "--weights", str(w), "--tokenizer", str(gguf)]
    r = cli.invoke(app, bare_spec(base + ["--spec", "dspark"]))
    assert r.exit_code == 2 and "has no `draft` program" in r.stderr
    assert "Traceback" not in r.stderr
    r = cli.invoke(app, bare_spec(base + ["--spec", "--spec-k", "0"]))   # bare: ngram here
    assert r.exit_code == 2 and "--spec-k must be at least 1" in r.stderr
