"""``--gemm splitk`` (issue 16): gemv.cu's GEMV with k split over a thread-block cluster for
the shapes :func:`kern_gen.llama.gemm_splitk.splits` picks (kernels/gemv_splitk.cu, ABI.md
4f).  Against ``--gemm gemv`` the manifests have byte-identical programs, symbols, states and
buffers; only the impls of the picked shapes' few-row kernels differ, each one step that
follows ABI.md 4f; gemv_splitk.cubin joins the cubins; the README says which."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import kern_manifest
import pytest
from kg_own import gemm_variants

from kern_gen.llama.command import PRESETS
from kern_gen.llama.gemm import GEMV_COLS, PARAMS, gemv_warps
from kern_gen.llama.gemm_splitk import SPLITK_CUBIN, splits, symbol
from kern_gen.llama.ir import TOK

ROOT = Path(__file__).resolve().parents[3]
NVCC = shutil.which("nvcc") or next((p for p in ("/usr/local/bin/nvcc",
                                                 "/usr/local/cuda/bin/nvcc")
                                     if Path(p).exists()), None)
FEW_ROW = re.compile(r"^(decode|verify)\.gemm(_silu)?\.(\d+)x(\d+)$")


def test_the_rule_on_the_example_shapes():
    """The split shapes are the ones whose 16-column blocks leave SMs idle: (n, k) -> S."""
    got = {(n, k): splits(n, k) for n, k in [
        (6144, 2560), (2560, 4096), (9728, 2560), (2560, 9728), (151936, 2560),  # Qwen3-4B
        (960, 576), (576, 576), (1536, 576), (576, 1536), (49152, 576)]}         # SmolLM2
    assert got == {(6144, 2560): 1, (2560, 4096): 4, (9728, 2560): 1, (2560, 9728): 4,
                   (151936, 2560): 1, (960, 576): 1, (576, 576): 1, (1536, 576): 1,
                   (576, 1536): 1, (49152, 576): 1}
    assert splits(4096, 2048) == 4          # 256 blocks: 1024 reach TARGET_BLOCKS
    assert splits(256, 65536) == 8          # 16 blocks: the largest S
    assert splits(2560, 1024) == 1          # 5 MB: below MIN_BYTES


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict[str, dict]:
    """Per preset: {"gemv": Result, "splitk": Result, "sha": gemv_splitk.cubin's sha256}."""
    if NVCC is None:
        pytest.skip("nvcc not found: the PDL check reads gemv_splitk.cubin's code")
    return gemm_variants(tmp_path_factory, ("gemv", "splitk"), SPLITK_CUBIN)


@pytest.mark.parametrize("name", list(PRESETS))
def test_splitk_variant_verifies_clean(variants, name):
    text = variants[name]["splitk"].manifest.decode()
    diags = kern_manifest.verify(kern_manifest.decode(text))
    assert not diags, kern_manifest.render_human(diags, text)


@pytest.mark.parametrize("name", list(PRESETS))
def test_only_the_split_shapes_differ(variants, name):
    a, b = (json.loads(variants[name][g].manifest) for g in ("gemv", "splitk"))
    for key in ("programs", "meta", "symbols", "states", "buffers"):
        assert json.dumps(a[key]) == json.dumps(b[key]), key
    assert list(a["kernels"]) == list(b["kernels"])
    differ = {k for k in a["kernels"] if a["kernels"][k] != b["kernels"][k]}
    picked = {k for k in a["kernels"] if (m := FEW_ROW.match(k))
              and splits(int(m.group(3)), int(m.group(4)), 2 if m.group(2) else 1) > 1}
    assert differ == picked
    ra, rb = variants[name]["gemv"], variants[name]["splitk"]
    text = rb.readme.decode()
    assert "`--gemm splitk`: the few-row programs' GEMMs" in text and "gemm_splitk.py" in text
    if name == "llama":          # SmolLM2's GEMVs are too small to split (MIN_BYTES)
        assert not picked and set(rb.cubins) == set(ra.cubins)
        return
    assert {FEW_ROW.match(k).group(1) for k in picked} == {"decode", "verify"}
    assert set(rb.cubins) == set(ra.cubins) | {SPLITK_CUBIN}


@pytest.mark.parametrize("name", list(PRESETS))
def test_splitk_steps_follow_the_abi(variants, name):
    doc = json.loads(variants[name]["splitk"].manifest)
    seen = 0
    for k, kern in doc["kernels"].items():
        m = FEW_ROW.match(k)
        silu = bool(m and m.group(2))
        if not m or (s := splits(int(m.group(3)), int(m.group(4)), 2 if silu else 1)) == 1:
            continue
        n, kk = int(m.group(3)), int(m.group(4))
        gy = 1 if m.group(1) == "decode" else {"ceil_div": [TOK, 8]}
        (st,) = kern["impl"]["steps"]
        assert st == {"symbol": symbol(s, silu), "cubin": SPLITK_CUBIN,
                      "sha256": variants[name]["sha"], "params": PARAMS,
                      "block": [32 * gemv_warps(2 * n if silu else n, kk), 1, 1],
                      "grid": [-(-n // GEMV_COLS), gy, s], "pdl": True,
                      "args": [{"arg": i} for i in range(len(PARAMS))]}, k
        seen += 1
    assert seen >= (0 if name == "llama" else 4)
