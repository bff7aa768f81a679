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


def test_weights_another_file_provides_are_not_exported(tmp_path, write_st, read_st,
                                                        make_manifest):
    """A DSpark manifest declares `draft.*` weights that the target's source lacks: the
    draft's own file provides them, so the export skips them (and only them)."""
    d = tmp_path / "hf"
    d.mkdir()
    write_st(d / "model.safetensors", {"a.weight": ("F32", np.ones((2, 3), np.float32))})
    draft = tmp_path / "draft.safetensors"
    write_st(draft, {"draft.fc.weight": ("BF16", np.zeros((3, 3), np.uint16)),
                     "draft.unused": ("BF16", np.zeros(2, np.uint16))})
    m = make_manifest(tmp_path / "m.json", {"a.weight": ("bf16", [2, 3]),
                                            "draft.fc.weight": ("bf16", [3, 3]),
                                            "draft.norm.weight": ("bf16", [3])})
    with pytest.raises(ExportError) as e:
        export_files(m, d, tmp_path / "o.safetensors", provided=[draft])
    # the one weight in neither file is named, with both places it was looked for
    assert e.value.problems == [
        f"weight `draft.norm.weight` (default): source tensor `draft.norm.weight` not found "
        f"in {HFSource(d).where}, nor in `{draft}`; closest: `a.weight`"]
    m = make_manifest(tmp_path / "m2.json", {"a.weight": ("bf16", [2, 3]),
                                             "draft.fc.weight": ("bf16", [3, 3])})
    s = export_files(m, d, tmp_path / "o.safetensors", provided=[draft])
    _, got, _ = read_st(tmp_path / "o.safetensors")
    assert set(got) == {"a.weight"} and s.tensors == 1
    assert s.provided == ("draft.fc.weight",)
    with pytest.raises(ExportError) as e:              # without it, the draft weight is missing
        export_files(m, d, tmp_path / "o2.safetensors")
    assert "`draft.fc.weight` not found" in e.value.problems[0]
    with pytest.raises(ExportError) as e:              # an unreadable provided file is named
        export_files(m, d, tmp_path / "o3.safetensors", provided=[tmp_path / "none.st"])
    assert str(tmp_path / "none.st") in str(e.value)
