"""``--gemm tma`` (issue 16): the bulk-copy GEMV (kernels/gemv_tma.cu, ABI.md 4d) as a third
implementation of the one-row programs' GEMM kernels (decode; the multi-row verify keeps
gemv.cu's, see ``kern_gen.llama.gemm.tma_rows``).  Against ``--gemm gemv`` (fused, the
default) the manifests have byte-identical programs, symbols, states and buffers; only the
impls of decode's GEMM kernels differ (``decode.gemm.*``, ``decode.gemm_silu.*``), each one
step that follows ABI.md 4d; gemv_tma.cubin joins the cubins; the README says which."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import kern_manifest
import pytest
from kg_own import gemm_variants

from kern_gen.llama.command import PRESETS
from kern_gen.llama.gemm import (GEMV_COLS, PARAMS, SPLIT_PARAMS, TMA_BLOCK, TMA_GRID_CAP,
                                 TMA_SMEM, TMA_SYMBOLS)
from kern_gen.llama.ir import TOK

ROOT = Path(__file__).resolve().parents[3]
NVCC = shutil.which("nvcc") or next((p for p in ("/usr/local/bin/nvcc",
                                                 "/usr/local/cuda/bin/nvcc")
                                     if Path(p).exists()), None)
FEW_ROW = re.compile(r"^(decode|verify)\.gemm(_silu|_split)?\.([\d+]+)x(\d+)$")
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not found: the PDL check reads "
                                                     "gemv_tma.cubin's code")


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict[str, dict]:
    """Per preset: {"gemv": Result, "tma": Result, "sha": gemv_tma.cubin's sha256}."""
    return gemm_variants(tmp_path_factory, ("gemv", "tma"), "gemv_tma.cubin")


@pytest.mark.parametrize("name", list(PRESETS))
def test_tma_variant_verifies_clean(variants, name):
    text = variants[name]["tma"].manifest.decode()
    diags = kern_manifest.verify(kern_manifest.decode(text))
    assert not diags, kern_manifest.render_human(diags, text)


@pytest.mark.parametrize("name", list(PRESETS))
def test_only_the_few_row_gemm_impls_differ(variants, name):
    a, b = (json.loads(variants[name][g].manifest) for g in ("gemv", "tma"))
    for key in ("programs", "meta", "symbols", "states", "buffers"):
        assert json.dumps(a[key]) == json.dumps(b[key]), key
    assert list(a["kernels"]) == list(b["kernels"])
    differ = {k for k in a["kernels"] if a["kernels"][k] != b["kernels"][k]}
    one_row = {k for k in a["kernels"] if FEW_ROW.match(k) and k.startswith("decode.")}
    assert differ == one_row and len(one_row) == 5          # qkv, o, gate_up+SiLU, down, head
    for k in one_row:
        assert a["kernels"][k]["params"] == b["kernels"][k]["params"], k
    ra, rb = variants[name]["gemv"], variants[name]["tma"]
    assert set(rb.cubins) == set(ra.cubins) | {"gemv_tma.cubin"}
    assert "`--gemm tma`: the few-row programs' GEMMs" in rb.readme.decode()
    text = rb.readme.decode()
    assert "kern_gemv_tma_silu_bf16" in text and "`tma_rows`" in text


@pytest.mark.parametrize("name", list(PRESETS))
def test_tma_steps_follow_the_abi(variants, name):
    doc = json.loads(variants[name]["tma"].manifest)
    kinds = set()
    for k, kern in doc["kernels"].items():
        m = FEW_ROW.match(k)
        if not m or m.group(1) != "decode":
            continue
        kind = {None: "gemm", "_silu": "silu", "_split": "split"}[m.group(2)]
        kinds.add(kind)
        widths, kk = [int(x) for x in m.group(3).split("+")], int(m.group(4))
        tiles = 2 if kind == "silu" else 1
        cols = sum(widths)
        params = SPLIT_PARAMS if kind == "split" else PARAMS
        gy = 1 if m.group(1) == "decode" else {"ceil_div": [TOK, 8]}
        (st,) = kern["impl"]["steps"]
        assert kern["params"] == params and kk % 8 == 0
        assert st == {"symbol": TMA_SYMBOLS[kind], "cubin": "gemv_tma.cubin",
                      "sha256": variants[name]["sha"], "params": params,
                      "block": TMA_BLOCK, "shared_mem": TMA_SMEM[tiles],
                      "grid": [min(-(-cols // GEMV_COLS), TMA_GRID_CAP[tiles]), gy, 1],
                      "pdl": True, "args": [{"arg": i} for i in range(len(params))]}, k
    assert kinds == {"gemm", "silu"}      # split3 serves only the multi-row programs


def test_the_gpu_test_pins_the_generators_launch():
    """kernels/tests/test_gemv_tma_gpu.py (run on the device without kern-gen) repeats the
    block, shared memory and grid cap: they must agree."""
    import ast
    src = (ROOT / "packages/kern-gen/kernels/tests/test_gemv_tma_gpu.py").read_text()
    vals = {t.id: ast.literal_eval(n.value) for n in ast.parse(src).body
            if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Name) and t.id in ("SMEM", "GRID_CAP", "BLOCK")}
    assert vals["SMEM"] == TMA_SMEM and vals["BLOCK"] == TMA_BLOCK[0]
    assert vals["GRID_CAP"] == {1: 396, 2: 132} == TMA_GRID_CAP
