import io
import json

import pytest
from typer.testing import CliRunner

from kern_run import runner
from kern_run.cli import app
from kern_run.defaults import gguf_path
from kern_run.errors import KernRunError
from krun_fakes import FakeRuntime, contract_manifest

cli = CliRunner()


def invoke(*args):
    r = cli.invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture
def model(tmp_path):
    """A conforming manifest, a kernels folder, a weights file and the real GGUF tokenizer."""
    try:
        gguf = gguf_path()
    except KernRunError as err:
        pytest.skip(str(err))
    m = tmp_path / "manifest.json"
    m.write_text(json.dumps(contract_manifest(max_tokens=4, vocab=49152)))
    (tmp_path / "kernels").mkdir()
    w = tmp_path / "w.safetensors"
    w.write_bytes(b"")
    return {"manifest": m, "weights": w,
            "tokenizer": gguf}


def model_args(m):
    return ["--manifest", str(m["manifest"]), "--weights", str(m["weights"]),
            "--tokenizer", str(m["tokenizer"])]


def test_missing_files_are_named(tmp_path):
    code, out, err = invoke("--manifest", str(tmp_path / "m.json"), "--weights",
                            str(tmp_path / "w.st"), "--tokenizer", str(tmp_path / "t.gguf"))
    assert code == 2 and "Traceback" not in err
    assert f"--manifest `{tmp_path / 'm.json'}`: no such file" in err
    assert f"--weights `{tmp_path / 'w.st'}`: no such file" in err
    assert f"--tokenizer `{tmp_path / 't.gguf'}`: no such file or directory" in err


def test_manifest_needs_weights_and_tokenizer(model):
    code, _, err = invoke("--manifest", str(model["manifest"]))
    assert code == 2
    assert "--weights is required" in err and "--tokenizer is required" in err


@pytest.mark.parametrize("opt,val,msg", [("--chunk", "0", "--chunk must be at least 1"),
                                         ("--steps", "0", "--steps must be at least 1"),
                                         ("--capacity", "1", "--capacity must be at least 2"),
                                         ("--gpu", "-1", "--gpu must be a device index")])
def test_bad_numbers(model, opt, val, msg):
    code, _, err = invoke(*model_args(model), opt, val)
    assert code == 2 and msg in err and "Traceback" not in err


def test_non_integer_option_is_a_usage_error(model):
    code, _, err = invoke(*model_args(model), "--chunk", "many")
    assert code == 2 and "--chunk" in err


def test_capacity_too_small_for_prompt_and_steps(model):
    code, _, err = invoke(*model_args(model), "--prompt", "The capital of France is",
                          "--steps", "10", "--capacity", "12")
    assert code == 2 and "--capacity 12 is too small for a prompt of 5 tokens plus --steps 10" in err


def test_manifest_outside_the_contract(model):
    doc = contract_manifest(vocab=49152, extra_inputs=["slot_mapping"])
    model["manifest"].write_text(json.dumps(doc))
    code, _, err = invoke(*model_args(model))
    assert code == 2 and "input buffers the caller does not write: `slot_mapping`" in err


def test_manifest_that_does_not_verify(model):
    doc = contract_manifest(vocab=49152)
    del doc["programs"]["decode"]["dispatches"][0]["args"][0]
    model["manifest"].write_text(json.dumps(doc))
    code, _, err = invoke(*model_args(model))
    assert code == 2 and "does not verify" in err


def test_tokenizer_of_another_model(model):
    model["manifest"].write_text(json.dumps(contract_manifest(vocab=1000)))
    code, _, err = invoke(*model_args(model))
    assert code == 2 and "do not belong to the same model" in err


def test_bad_files_are_named_before_the_missing_gpu(model, monkeypatch):
    """Without a GPU, what can be checked without one is checked first (issue 17, item 6):
    here the kernels folder holds no cubin for the unpinned step, which the artifact check
    names (and, once that is fixed, the empty weights file)."""
    monkeypatch.setattr(runner, "probe_gpu", lambda: (False, "no CUDA driver"))
    code, out, err = invoke(*model_args(model))
    assert code == 1 and "kernel artifact" in err and "holds no *.cubin file" in err, err
    assert "no usable GPU" not in err and "Traceback" not in err
    (model["manifest"].parent / "kernels" / "fake.cubin").write_bytes(b"not an ELF")
    code, out, err = invoke(*model_args(model))
    assert code == 1 and str(model["weights"]) in err and "no usable GPU" not in err, err


def test_missing_pinned_cubin_is_named_before_the_missing_gpu(tmp_path, monkeypatch):
    """The bundled example with one of its pinned cubins gone: named, before the probe."""
    import shutil
    from kern_run.defaults import example_files
    manifest, kernels, _ = example_files()
    k = tmp_path / "kernels"
    shutil.copytree(kernels, k)
    gone = sorted(k.iterdir())[0]
    gone.unlink()
    (tmp_path / "manifest.json").write_bytes(manifest.read_bytes())
    w = tmp_path / "w.safetensors"
    w.write_bytes(b"")
    monkeypatch.setattr(runner, "probe_gpu", lambda: (False, "no CUDA driver"))
    try:
        gguf = gguf_path()
    except KernRunError as err:
        pytest.skip(str(err))
    code, _, err = invoke("--manifest", str(tmp_path / "manifest.json"), "--weights", str(w),
                          "--tokenizer", str(gguf))
    assert code == 1 and gone.name in err and "no usable GPU" not in err, err


def test_no_gpu_bench(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "probe_gpu", lambda: (False, "no CUDA driver"))
    q = tmp_path / "q"
    q.mkdir()
    (q / "manifest.json").write_text("{}")
    code, _, err = invoke("bench", "--case", "qwen3", "--qwen3", str(q))
    assert code == 1 and len(err.strip().splitlines()) == 1 and "no usable GPU" in err


def test_bench_bad_case():
    code, _, err = invoke("bench", "--case", "gpt5")
    assert code == 2 and "--case `gpt5` is not a case" in err


def test_default_model_absent_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setenv("KERN_EXAMPLES", str(tmp_path))
    code, _, err = invoke()
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "the bundled default model is not there" in lines[0]


def run_fake(model, script, **kw):
    fake = FakeRuntime(script=script)
    out, err = io.StringIO(), io.StringIO()
    opts = runner.RunOptions(manifest=model["manifest"], weights=[model["weights"]],
                             tokenizer=model["tokenizer"], **kw)
    res = runner.run(opts, out=out, err=err, runtime_factory=lambda *a, **k: fake)
    return fake, res, out.getvalue(), err.getvalue()


def test_end_to_end_with_a_fake_runtime(model):
    # " Paris." = [7042, 30]; then EOS (2)
    fake, res, out, err = run_fake(model, [7042, 30, 2], prompt="The capital of France is")
    assert out == "The capital of France is Paris.\n"
    assert res.text == " Paris." and res.result.stop == "eos"
    assert fake.closed
    assert "prompt 5 tokens" in err and "stopped at EOS" in err and "ms/token" in err
    # chunk clamped to tokens.max = 4: the 4 prefill tokens are one full chunk (a graph)
    assert fake.runs()[0] == ("run", "prefill", {"tokens": 4}, True)


def test_chat_wraps_the_prompt(model):
    fake, res, out, _ = run_fake(model, [7042, 2], prompt="Capital of France?", chat=True)
    first = [e[2] for e in fake.events if e[0] == "write" and e[1] == "token_ids"]
    ids = [int(i) for a in first[:-1] for i in a]
    assert ids[:3] == [1, 9690, 198]  # <|im_start|>system\n
    assert out == " Paris\n"  # chat output does not echo the prompt


def test_step_limit_in_stats(model):
    _, res, _, err = run_fake(model, [7042] * 10, steps=3, eager=True)
    assert res.result.tokens == [7042] * 3 and "stopped at --steps 3" in err
    assert "[eager]" in err


def test_tokenizer_paths_resolve(model):
    with pytest.raises(KernRunError, match="--tokenizer"):
        runner.run(runner.RunOptions(manifest=model["manifest"], weights=[model["weights"]],
                                     tokenizer=model["manifest"].parent / "nope"))
