"""kernels/sass_compare.py, the CPU check that a source edit left the own kernels' machine code
alone: byte-identical builds pass without nvdisasm; a cubin missing on one side fails; with
nvdisasm (``$NVDISASM`` or PATH), a cubin of other code fails with its SASS diff."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / "sass_compare.py"


def _run(*args: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True,
                          text=True)


def _dirs(tmp_path: Path, a: bytes, b: bytes | None) -> tuple[Path, Path]:
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    (old / "k.cubin").write_bytes(a)
    if b is not None:
        (new / "k.cubin").write_bytes(b)
    return old, new


def test_identical_builds_pass_without_nvdisasm(tmp_path):
    r = _run(*_dirs(tmp_path, b"\x7fELF same", b"\x7fELF same"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["k.cubin: bytes same"]


def test_a_missing_cubin_fails(tmp_path):
    old, new = _dirs(tmp_path, b"\x7fELF", None)
    r = _run(old, new)
    assert r.returncode == 1 and r.stdout.splitlines() == [f"k.cubin: only in {old}"]


@pytest.mark.skipif(not (os.environ.get("NVDISASM") or shutil.which("nvdisasm"))
                    or not shutil.which("nvcc"), reason="needs nvcc and nvdisasm")
def test_other_code_fails_with_its_diff(tmp_path):
    cubins = []
    for i, body in enumerate(("o[0] = 1.f;", "o[0] = 2.f * o[1];")):
        src = tmp_path / f"k{i}.cu"
        src.write_text(f'extern "C" __global__ void k(float* o) {{ {body} }}\n')
        out = tmp_path / f"d{i}"
        out.mkdir()
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90", str(src), "-o", str(out / "k.cubin")],
                       check=True)
        cubins.append(out)
    r = _run(*cubins)
    assert r.returncode == 1 and "k.cubin: SASS DIFFERS" in r.stdout


@pytest.mark.skipif(not (os.environ.get("NVDISASM") or shutil.which("nvdisasm"))
                    or not shutil.which("nvcc"), reason="needs nvcc and nvdisasm")
def test_functions_compare_one_by_one(tmp_path):
    """--function: a kernel unchanged beside added and changed ones is "SASS same" (its
    labels renumbered), the changed one differs, and a kernel on one side only fails."""
    loop = "for (int i = 0; i < n; ++i) o[i] = o[i] * 2.f;"
    sources = (
        f'extern "C" __global__ void kf(float* o, int n) {{ {loop} }}\n'
        'extern "C" __global__ void kg(float* o) { o[0] = 1.f; }\n',
        f'extern "C" __global__ void ka(float* o, int n) {{ {loop} {loop} }}\n'
        f'extern "C" __global__ void kf(float* o, int n) {{ {loop} }}\n'
        'extern "C" __global__ void kg(float* o) { o[0] = 2.f * o[1]; }\n',
    )
    cubins = []
    for i, text in enumerate(sources):
        src = tmp_path / f"k{i}.cu"
        src.write_text(text)
        cubins.append(tmp_path / f"k{i}.cubin")
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90", str(src), "-o", str(cubins[-1])],
                       check=True)
    same = subprocess.run([sys.executable, str(TOOL), *map(str, cubins), "--function", "kf"],
                          capture_output=True, text=True)
    assert same.returncode == 0 and same.stdout.startswith("kf: SASS same"), same.stdout
    other = subprocess.run([sys.executable, str(TOOL), *map(str, cubins), "--function", "k"],
                           capture_output=True, text=True)
    lines = other.stdout.splitlines()
    assert other.returncode == 1
    assert lines[0] == f"ka: only in {cubins[1]}"
    assert lines[1].startswith("kf: SASS same") and lines[2].startswith("kg: SASS DIFFERS")
