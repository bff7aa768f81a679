import json

import kern_manifest as km
import numpy as np
import pytest

from krt_helpers import EXAMPLES, st_tensor, write_safetensors
from kern_runtime.errors import WeightArtifactError
from kern_runtime.weights import bind_weights, read_header, upload_chunks


def vm_with_weights():
    obj = json.loads((EXAMPLES / "toy" / "manifest.json").read_text())
    # a second weight with a 2-D shape, read by the norm kernel's gamma slot in a 2nd dispatch
    obj["buffers"]["beta"] = {"dtype": "bf16", "shape": [128], "class": "weight"}
    obj["programs"]["step"]["dispatches"].insert(1, {
        "kernel": "norm", "args": [{"buf": "x"}, {"buf": "beta"}, {"buf": "h"}, {"sym": "tokens"}]})
    return km.check(km.from_obj(obj))


def bf16(n, seed=0):
    return np.random.default_rng(seed).integers(0, 2**16, n, dtype=np.uint16)


def test_header_matches_safetensors_package(tmp_path):
    from safetensors.numpy import save_file
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.arange(5, dtype=np.int64)
    save_file({"a": a, "b": b}, str(tmp_path / "x.safetensors"), metadata={"k": "v"})
    h = read_header(tmp_path / "x.safetensors")
    assert set(h) == {"a", "b"}
    raw = (tmp_path / "x.safetensors").read_bytes()
    ea, eb = h["a"], h["b"]
    assert ea.dtype == "F32" and ea.shape == (3, 4) and ea.nbytes == 48
    assert np.frombuffer(raw[ea.start:ea.start + ea.nbytes], np.float32).tolist() == a.ravel().tolist()
    assert np.frombuffer(raw[eb.start:eb.start + eb.nbytes], np.int64).tolist() == b.tolist()


def test_bind_ok_across_files(tmp_path):
    vm = vm_with_weights()
    f1 = write_safetensors(tmp_path / "a.safetensors", {"gamma": st_tensor(bf16(128), "BF16"),
                                                       "extra": st_tensor(np.zeros(3, np.float32))})
    f2 = write_safetensors(tmp_path / "b.safetensors", {"beta": st_tensor(bf16(128, 1), "BF16")})
    bindings, unused = bind_weights(vm, [f1, f2])
    assert [(b.buffer, b.entry.name) for b in bindings] == [("gamma", "gamma"), ("beta", "beta")]
    assert unused == 1
    raw = f2.read_bytes()
    e = bindings[1].entry
    assert np.frombuffer(raw[e.start:e.start + e.nbytes], np.uint16).tolist() == bf16(128, 1).tolist()


def test_bind_reports_every_problem(tmp_path):
    vm = vm_with_weights()
    f1 = write_safetensors(tmp_path / "a.safetensors", {"gamma": st_tensor(np.zeros(128, np.float32))})
    with pytest.raises(WeightArtifactError) as e:
        bind_weights(vm, [f1])
    msg = str(e.value)
    assert msg.startswith("[weight artifact] weights: 2 weight problems")
    assert "weight `gamma`: dtype is F32 in `a.safetensors`, the manifest declares bf16" in msg
    assert "weight `beta`: not found in any weight file (expected bf16[128])" in msg


def test_bind_shape_and_ambiguity(tmp_path):
    vm = vm_with_weights()
    f1 = write_safetensors(tmp_path / "a.safetensors", {"gamma": st_tensor(bf16(64).reshape(2, 32), "BF16"),
                                                       "beta": st_tensor(bf16(128), "BF16")})
    f2 = write_safetensors(tmp_path / "b.safetensors", {"beta": st_tensor(bf16(128), "BF16")})
    with pytest.raises(WeightArtifactError) as e:
        bind_weights(vm, [f1, f2])
    msg = str(e.value)
    assert "weight `gamma`: shape is [2, 32] in `a.safetensors`, the manifest declares [128]" in msg
    assert "weight `beta`: ambiguous, present in `a.safetensors`, `b.safetensors`" in msg


def test_malformed_files(tmp_path):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(b"\x05")
    with pytest.raises(WeightArtifactError, match="shorter"):
        read_header(p)
    p.write_bytes((10**9).to_bytes(8, "little") + b"{}")
    with pytest.raises(WeightArtifactError, match="does not fit"):
        read_header(p)
    p.write_bytes((4).to_bytes(8, "little") + b"{,}x")
    with pytest.raises(WeightArtifactError, match="not valid JSON"):
        read_header(p)
    hdr = json.dumps({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}).encode()
    p.write_bytes(len(hdr).to_bytes(8, "little") + hdr + b"\0" * 16)
    with pytest.raises(WeightArtifactError, match="data_offsets"):
        read_header(p)
    with pytest.raises(WeightArtifactError, match="cannot read"):
        read_header(tmp_path / "missing.safetensors")


def test_upload_chunks(tmp_path):
    vm = vm_with_weights()
    f1 = write_safetensors(tmp_path / "a.safetensors", {"beta": st_tensor(bf16(128), "BF16"),
                                                       "gamma": st_tensor(bf16(128), "BF16")})
    bindings, _ = bind_weights(vm, [f1])
    chunks = list(upload_chunks(bindings, 100))
    # file order (beta first in the file), each 256-byte tensor in 100+100+56
    assert [(c.buffer, c.dst_offset, c.nbytes) for c in chunks] == [
        ("beta", 0, 100), ("beta", 100, 100), ("beta", 200, 56),
        ("gamma", 0, 100), ("gamma", 100, 100), ("gamma", 200, 56)]
    h = read_header(f1)
    assert chunks[0].file_offset == h["beta"].start
    assert chunks[4].file_offset == h["gamma"].start + 100
    assert sum(c.nbytes for c in upload_chunks(bindings, 1 << 20)) == 512


def test_import_loads_no_gguf():
    """The runtime reads headers through kern-weights, whose GGUF source stays unloaded."""
    import subprocess
    import sys
    code = "import sys, kern_runtime; print('gguf' in sys.modules, 'kern_weights' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_bad_entries_are_listed_with_the_file(tmp_path):
    p = tmp_path / "w.safetensors"
    hdr = json.dumps({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]},
                      "b": {"dtype": "X9", "shape": [1], "data_offsets": [0, 1]}}).encode()
    p.write_bytes(len(hdr).to_bytes(8, "little") + hdr + b"\0" * 16)
    with pytest.raises(WeightArtifactError) as e:
        read_header(p)
    assert str(e.value) == (f"[weight artifact] weight file `{p}`: malformed safetensors header\n"
                            f"  - tensor `a`: data_offsets [0, 12] do not match F32[4] inside a "
                            f"{p.stat().st_size}-byte file\n"
                            f"  - tensor `b`: unknown dtype 'X9'")
