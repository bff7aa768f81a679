"""The runtime's own copy kernel without a GPU: its PTX is the one ``copies.cu`` compiles to
(checked where nvcc is installed), and the parameter block the launch packs matches the
layout the PTX reads."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kern_runtime.cuda.copies import MAX_SEGMENTS, SYMBOL, pack

CUDA_DIR = Path(__file__).resolve().parents[1] / "src" / "kern_runtime" / "cuda"


def test_the_packed_block_matches_the_ptx_parameter():
    ptx = (CUDA_DIR / "copies.ptx").read_text()
    assert f".entry {SYMBOL}(" in ptx
    assert re.search(rf"\.param \.align 8 \.b8 {SYMBOL}_param_0\[168\]", ptx)
    assert f"[{SYMBOL}_param_0+160]" in ptx                    # count
    assert "griddepcontrol.wait" in ptx                        # waits before it reads
    block = pack([(0x1000, 0x2000, 12), (0x3000, 0x4000, 7)])
    assert block.nbytes == 168
    assert block[0:16].view(np.uint64).tolist() == [0x1000, 0x3000]
    assert block[64:80].view(np.uint64).tolist() == [0x2000, 0x4000]
    assert block[128:136].view(np.uint32).tolist() == [12, 7]
    assert block[160:164].view(np.int32).tolist() == [2]
    with pytest.raises(ValueError, match=f"one launch copies 1 … {MAX_SEGMENTS}"):
        pack([(0, 0, 4)] * (MAX_SEGMENTS + 1))


def test_the_ptx_is_what_copies_cu_compiles_to(tmp_path):
    """Regenerate: ``nvcc -ptx -arch=sm_90 -o copies.ptx copies.cu`` in the cuda folder."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc here")
    shipped = (CUDA_DIR / "copies.ptx").read_text()
    out = tmp_path / "copies.ptx"
    subprocess.run([nvcc, "-ptx", "-arch=sm_90", "-o", str(out), str(CUDA_DIR / "copies.cu")],
                   check=True, capture_output=True)
    fresh = out.read_text()
    build = re.compile(r"^// (Compiler Build ID|Cuda compilation tools|Based on).*$", re.M)
    if build.findall(fresh) != build.findall(shipped):
        pytest.skip("another nvcc version than the one that made the shipped PTX")
    assert fresh == shipped
