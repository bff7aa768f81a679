import json
from pathlib import Path

import pytest

from kern_run import defaults
from kern_run.defaults import gguf_path
from kern_run.errors import KernRunError


def test_absent_example_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("KERN_EXAMPLES", str(tmp_path))
    with pytest.raises(KernRunError) as ei:
        defaults.example_files()
    assert len(ei.value.problems) == 1
    assert "smollm2-135m" in str(ei.value) and "--manifest" in str(ei.value)


def test_examples_dir_is_the_repository_one(monkeypatch):
    monkeypatch.delenv("KERN_EXAMPLES", raising=False)
    ex = defaults.examples_dir()
    assert ex is not None and (ex / "toy" / "manifest.json").is_file()


def test_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("KERN_CACHE", str(tmp_path))
    assert defaults.cache_dir() == tmp_path
    monkeypatch.delenv("KERN_CACHE")
    assert defaults.cache_dir() == Path.home() / ".cache" / "kern"


def test_example_files_found(monkeypatch, tmp_path):
    d = tmp_path / "smollm2-135m"
    (d / "kernels").mkdir(parents=True)
    (d / "manifest.json").write_text("{}")
    monkeypatch.setenv("KERN_EXAMPLES", str(tmp_path))
    assert defaults.example_files() == (d / "manifest.json", d / "kernels", None)
    (d / "plan.json").write_text("{}")          # not the generator's name
    assert defaults.example_files()[2] is None
    (d / "export-plan.json").write_text("{}")   # what kern-gen writes
    assert defaults.example_files()[2] == d / "export-plan.json"


def test_weights_exported_once_from_the_gguf(monkeypatch, tmp_path):
    """The default's export path, on a one-weight manifest (the real example's weights are
    exported the same way by kern_weights.export_files)."""
    try:
        gguf_path()
    except KernRunError as err:
        pytest.skip(str(err))
    monkeypatch.setenv("KERN_CACHE", str(tmp_path / "cache"))
    m = tmp_path / "manifest.json"
    doc = json.loads((Path(__file__).parents[3] / "examples" / "toy" / "manifest.json").read_text())
    # one weight, named as the GGUF's HF-mapped tensor: the final norm, bf16[576]
    for b in list(doc["buffers"]):
        if doc["buffers"][b]["class"] == "weight":
            del doc["buffers"][b]
    doc["buffers"]["model.norm.weight"] = {"dtype": "bf16", "shape": [576], "class": "weight"}
    m.write_text(json.dumps(doc))
    gguf = defaults.gguf_path()
    logs = []
    try:
        out = defaults.ensure_weights(m, None, gguf, log=logs.append)
    except KernRunError as err:
        pytest.skip(f"toy manifest not adaptable here: {err}")
    assert out.is_file() and out.parent == tmp_path / "cache" / "smollm2-135m"
    assert len(logs) == 1 and "first use" in logs[0]
    assert defaults.ensure_weights(m, None, gguf, log=logs.append) == out
    assert len(logs) == 1  # cached: no second export
    from safetensors import safe_open
    with safe_open(str(out), "np") as f:
        assert list(f.keys()) == ["model.norm.weight"]


def test_a_draft_file_beside_the_export_is_not_exported(monkeypatch, tmp_path):
    """A DSpark manifest's `draft.*` weights come from draft.safetensors, the rest from the
    GGUF; a draft weight in neither is one clear error naming both."""
    try:
        gguf = gguf_path()
    except KernRunError as err:
        pytest.skip(str(err))
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import save_file
    monkeypatch.setenv("KERN_CACHE", str(tmp_path / "cache"))
    doc = json.loads((Path(__file__).parents[3] / "examples" / "toy" / "manifest.json").read_text())
    for b in list(doc["buffers"]):
        if doc["buffers"][b]["class"] == "weight":
            del doc["buffers"][b]
    doc["buffers"]["model.norm.weight"] = {"dtype": "bf16", "shape": [576], "class": "weight"}
    doc["buffers"]["draft.norm.weight"] = {"dtype": "bf16", "shape": [576], "class": "weight"}
    m = tmp_path / "manifest.json"
    m.write_text(json.dumps(doc))
    with pytest.raises(KernRunError) as ei:
        defaults.ensure_weights(m, None, gguf, log=lambda s: None)
    assert "`draft.norm.weight` not found" in str(ei.value)
    draft = tmp_path / "draft.safetensors"
    save_file({"draft.norm.weight": np.zeros(576, np.float16)}, str(draft))
    out = defaults.ensure_weights(m, None, gguf, log=lambda s: None, provided=[draft],
                                  example="smollm2-135m-dspark")
    assert out.parent == tmp_path / "cache" / "smollm2-135m-dspark"
    with safe_open(str(out), "np") as f:
        assert list(f.keys()) == ["model.norm.weight"]


def test_default_example_follows_spec(monkeypatch, tmp_path):
    monkeypatch.setenv("KERN_EXAMPLES", str(tmp_path))
    assert defaults.default_example(None) == ("smollm2-135m", None)
    name, note = defaults.default_example("auto")
    assert name == "smollm2-135m" and "ngram" in note
    with pytest.raises(KernRunError, match="--spec dspark: the bundled DSpark example"):
        defaults.default_example("dspark")
    d = tmp_path / "smollm2-135m-dspark"
    d.mkdir()
    (d / "manifest.json").write_text("{}")
    assert defaults.default_example("auto") == ("smollm2-135m-dspark", None)
    assert defaults.default_example("dspark") == ("smollm2-135m-dspark", None)
    assert defaults.default_example("ngram") == ("smollm2-135m", None)
