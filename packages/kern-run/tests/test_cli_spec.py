"""``kern-run --spec ngram`` / ``--spec-check`` through the runner and the CLI, on the numpy
KV stand-in runtime (spec_fakes): refusals first, then output equal to plain greedy."""

import io
import json

import pytest
from typer.testing import CliRunner

from kern_run import runner
from kern_run.cli import app
from kern_run.defaults import gguf_path
from kern_run.errors import ContractError, KernRunError
from krun_fakes import contract_manifest
from spec_fakes import KVModelRuntime

cli = CliRunner()
VOCAB = 49152


def _model(tmp_path, verify: bool):
    try:
        gguf = gguf_path()
    except KernRunError as err:
        pytest.skip(str(err))
    tmp_path.mkdir(parents=True, exist_ok=True)
    m = tmp_path / "manifest.json"
    m.write_text(json.dumps(contract_manifest(max_tokens=16, vocab=VOCAB, verify=verify)))
    (tmp_path / "kernels").mkdir()
    w = tmp_path / "w.safetensors"
    w.write_bytes(b"")
    return m, w, gguf


def _run(tmp_path, verify=True, **kw):
    m, w, gguf = _model(tmp_path, verify)
    fake = KVModelRuntime(vocab=VOCAB, capacity=4096, max_tokens=16, model="copy", seed=3)
    out, err = io.StringIO(), io.StringIO()
    opts = runner.RunOptions(manifest=m, weights=[w], tokenizer=gguf, capacity=4096,
                             prompt="one two three one two three one two", **kw)
    res = runner.run(opts, out=out, err=err, runtime_factory=lambda *a, **k: fake)
    return res, out.getvalue(), err.getvalue()


def test_spec_output_equals_plain_greedy_and_reports_rounds(tmp_path):
    plain, pout, _ = _run(tmp_path / "a", steps=48)
    spec, sout, serr = _run(tmp_path / "b", steps=48, spec="ngram", spec_k=5)
    assert spec.result.tokens == plain.result.tokens and sout == pout
    assert spec.result.spec.rounds > 0, "the copy model repeats: lookup must find drafts"
    assert "spec ngram" in serr and "τ" in serr


def test_spec_check_reports_identity(tmp_path):
    res, _, err = _run(tmp_path, steps=40, spec="ngram", spec_check=True)
    assert "spec-check: identical to plain greedy over" in err


def test_spec_needs_a_verify_program(tmp_path):
    with pytest.raises(ContractError) as ei:
        _run(tmp_path, verify=False, steps=8, spec="ngram")
    msg = "\n".join(ei.value.problems)
    assert "--spec needs a program `verify`" in msg and "`predictions`" in msg


@pytest.mark.parametrize("args,msg", [
    (["--spec", "dspark"], "has no `draft` program (no DSpark draft"),
    (["--spec", "medusa"], "--spec 'medusa': give no value"),
    (["--spec-check"], "--spec-check needs --spec"),
    (["--spec", "ngram", "--spec-ngram", "x"], "--spec-ngram 'x': give MIN:MAX"),
    (["--spec", "ngram", "--spec-ngram", "3:2"], "1 ≤ min ≤ max"),
    (["--spec", "ngram", "--spec-k", "16"], "--spec-k 16: a round verifies k + 1 = 17"),
])
def test_bad_spec_options_are_one_line_exit_2(tmp_path, args, msg):
    m, w, gguf = _model(tmp_path, verify=True)
    r = cli.invoke(app, ["--manifest", str(m), "--weights", str(w), "--tokenizer", str(gguf),
                         *args])
    assert r.exit_code == 2, r.output
    assert msg in r.stderr and "Traceback" not in r.stderr
