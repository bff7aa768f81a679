"""``export_files``: the one export from files that ``kern-gen export``, kern-run's default
model and the device checks share; a directory is an HF checkpoint, a file a GGUF file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kern_weights import ExportError, HFSource, Plan, export, export_files, read_manifest


@pytest.fixture
def files(tmp_path, write_st, make_manifest):
    d = tmp_path / "hf"
    d.mkdir()
    write_st(d / "model.safetensors", {
        "a.weight": ("F32", np.arange(6, dtype=np.float32).reshape(2, 3)),
        "b.weight": ("F32", np.ones((1, 3), np.float32))})
    m = make_manifest(tmp_path / "m.json", {"ab": ("bf16", [3, 3])})
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"weights": {"ab": {"concat": ["a.weight", "b.weight"]}}}))
    return tmp_path, d, m, plan


def test_paths_give_what_export_gives(files, read_st):
    tmp, d, m, plan = files
    s = export_files(m, d, tmp / "one.safetensors", plan)
    export(read_manifest(m), HFSource(d), tmp / "two.safetensors", Plan.read(plan))
    assert s.tensors == 1 and s.out == tmp / "one.safetensors"
    assert (tmp / "one.safetensors").read_bytes() == (tmp / "two.safetensors").read_bytes()
    _, got, _ = read_st(tmp / "one.safetensors")
    assert got["ab"][0] == "BF16" and got["ab"][1].shape == (3, 3)


def test_a_file_is_read_as_gguf_and_objects_pass_through(files):
    tmp, d, m, plan = files
    pytest.importorskip("gguf")  # the GGUF source is the `gguf` extra
    with pytest.raises(ExportError) as e:
        export_files(m, d / "model.safetensors", tmp / "o.safetensors", plan)
    assert e.value.problems[0].startswith(f"GGUF file `{d / 'model.safetensors'}`: not a "
                                          f"readable GGUF file")
    with pytest.raises(ExportError) as e:
        export_files(m, HFSource(d), tmp / "o.safetensors")   # default plan: no `ab` tensor
    assert e.value.problems[0].startswith("weight `ab` (default): source tensor `ab` not found")
    assert not (tmp / "o.safetensors").exists()
