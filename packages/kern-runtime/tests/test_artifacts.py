import hashlib
import json

import kern_manifest as km
import pytest

from krt_helpers import EXAMPLES
from kern_runtime.artifacts import read_cubins, resolve_steps
from kern_runtime.errors import KernelArtifactError


def toy(sha=None):
    obj = json.loads((EXAMPLES / "toy" / "manifest.json").read_text())
    step = obj["kernels"]["norm"]["impl"]["steps"][0]
    if sha is None:
        del step["sha256"]
    else:
        step["sha256"] = sha
    return km.check(km.from_obj(obj))


def test_read_cubins_sha_ok_and_search(tmp_path):
    (tmp_path / "toy.cubin").write_bytes(b"TOY")
    (tmp_path / "other.cubin").write_bytes(b"OTHER")
    (tmp_path / "notes.txt").write_text("x")
    files, search = read_cubins(toy(hashlib.sha256(b"TOY").hexdigest().upper()), tmp_path)
    assert set(files) == {"toy.cubin", "other.cubin"}
    assert search == ["other.cubin", "toy.cubin"]  # energy's steps are unpinned
    assert files["toy.cubin"].data == b"TOY"


def test_read_cubins_sha_mismatch(tmp_path):
    (tmp_path / "toy.cubin").write_bytes(b"TOY")
    with pytest.raises(KernelArtifactError) as e:
        read_cubins(toy("0" * 64), tmp_path)
    msg = str(e.value)
    assert msg.startswith("[kernel artifact] kernels directory")
    assert f"cubin `toy.cubin`: sha256 is {hashlib.sha256(b'TOY').hexdigest()}" in msg
    assert "kernel `norm` step 0 pins " + "0" * 64 in msg


def test_read_cubins_missing(tmp_path):
    with pytest.raises(KernelArtifactError) as e:
        read_cubins(toy(), tmp_path)
    msg = str(e.value)
    assert "cubin `toy.cubin`: cannot read" in msg and "needed by kernel `norm` step 0" in msg
    assert "no *.cubin file" in msg
    with pytest.raises(KernelArtifactError, match="does not exist"):
        read_cubins(toy(), tmp_path / "nope")
    with pytest.raises(KernelArtifactError, match="no kernels directory"):
        read_cubins(toy(), None)


def fake_lookup(table):
    return lambda mod, sym: table.get((mod, sym))


def test_resolve_by_layout(tmp_path):
    (tmp_path / "toy.cubin").write_bytes(b"TOY")
    (tmp_path / "a.cubin").write_bytes(b"A")
    (tmp_path / "b.cubin").write_bytes(b"B")
    vm = toy()
    files, search = read_cubins(vm, tmp_path)
    table = {
        ("toy.cubin", "toy_rms_norm"): [8, 8, 8, 4],
        # same name, two layouts: the 4-param one matches toy_partial's declaration
        ("a.cubin", "toy_partial"): [8, 8, 8],
        ("b.cubin", "toy_partial"): [8, 8, 8, 4],
        ("b.cubin", "toy_reduce"): [8, 8, 4],
    }
    res = resolve_steps(vm, files, search, fake_lookup(table))
    assert res[("norm", 0)].module == "toy.cubin" and res[("norm", 0)].pinned
    assert res[("energy", 0)].module == "b.cubin" and not res[("energy", 0)].pinned
    assert res[("energy", 1)].module == "b.cubin"


def test_resolve_errors(tmp_path):
    (tmp_path / "toy.cubin").write_bytes(b"TOY")
    (tmp_path / "a.cubin").write_bytes(b"A")
    (tmp_path / "b.cubin").write_bytes(b"B")
    vm = toy()
    files, search = read_cubins(vm, tmp_path)
    table = {
        ("toy.cubin", "toy_rms_norm"): [8, 8, 8, 8],          # wrong layout
        ("a.cubin", "toy_partial"): [8, 8, 8, 4],
        ("b.cubin", "toy_partial"): [8, 8, 8, 4],             # ambiguous, different files
    }
    with pytest.raises(KernelArtifactError) as e:
        resolve_steps(vm, files, search, fake_lookup(table))
    msg = str(e.value)
    assert "3 steps could not be resolved" in msg
    assert ("kernel `norm` step 0 (`toy_rms_norm`): declared params have 4 params, sizes "
            "[8, 8, 8, 4], but the function in cubin `toy.cubin` has 4 params, sizes [8, 8, 8, 8]") in msg
    assert "kernel `energy` step 0 (`toy_partial`): ambiguous" in msg
    assert "kernel `energy` step 1 (`toy_reduce`): symbol not found in any of the 3 modules" in msg


def test_resolve_identical_modules_not_ambiguous(tmp_path):
    (tmp_path / "toy.cubin").write_bytes(b"TOY")
    (tmp_path / "a.cubin").write_bytes(b"SAME")
    (tmp_path / "b.cubin").write_bytes(b"SAME")
    vm = toy()
    files, search = read_cubins(vm, tmp_path)
    table = {("toy.cubin", "toy_rms_norm"): [8, 8, 8, 4], ("a.cubin", "toy_partial"): [8, 8, 8, 4],
             ("b.cubin", "toy_partial"): [8, 8, 8, 4], ("b.cubin", "toy_reduce"): [8, 8, 4],
             ("toy.cubin", "toy_partial"): [8, 8, 4]}
    res = resolve_steps(vm, files, search, fake_lookup(table))
    assert res[("energy", 0)].module == "a.cubin"


def test_pinned_symbol_missing(tmp_path):
    (tmp_path / "toy.cubin").write_bytes(b"TOY")
    vm = toy()
    files, search = read_cubins(vm, tmp_path)
    table = {("toy.cubin", "toy_partial"): [8, 8, 8, 4], ("toy.cubin", "toy_reduce"): [8, 8, 4]}
    with pytest.raises(KernelArtifactError, match="symbol not found in cubin `toy.cubin`"):
        resolve_steps(vm, files, search, fake_lookup(table))
