"""``--gemm cublaslt|gemv`` (issue 16 item 2): the two implementations of the few-row
programs' GEMMs give manifests whose programs are byte-identical and whose kernels differ
only in the impls of the ``decode.gemm.<n>x<k>`` / ``verify.gemm.<n>x<k>`` kernels (with
``--no-fuse``); both verify clean; the GEMV steps follow kernels/ABI.md 4; a bad ``--gemm``
is refused in one line.  The default ``--fuse`` (:mod:`kern_gen.llama.fuse`) removes exactly
one launch per layer from ``decode`` and four from ``verify``, leaves the wide programs as
they are, and its steps follow ABI.md 4a/4b."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import kern_manifest
import pytest
from kg_own import own_committed
from kern_mine import encode_json, mine
from typer.testing import CliRunner

from kern_gen.cli import app
from kern_gen.llama import WiringError, generate
from kern_gen.llama.command import PRESETS
from kern_gen.llama.gemm import GEMV_COLS, PARAMS, gemv_warps
from kern_gen.llama.ir import TOK
from kern_gen.llama.pdl_order import SMALL_EARLY_BYTES
from kern_gen.llama.pipeline import _build_own

ROOT = Path(__file__).resolve().parents[3]
ABI = ROOT / "packages" / "kern-gen" / "kernels" / "ABI.md"
NVCC = shutil.which("nvcc") or next((p for p in ("/usr/local/bin/nvcc",
                                                 "/usr/local/cuda/bin/nvcc")
                                     if Path(p).exists()), None)
FEW_ROW_GEMM = re.compile(r"^(decode|verify)\.gemm\.(\d+)x(\d+)$")


@pytest.fixture(scope="module")
def built() -> dict[str, bytes]:
    """The own cubins built with nvcc (empty without nvcc)."""
    return {} if NVCC is None else _build_own(NVCC)


@pytest.fixture(scope="module")
def gemv_cubin(built) -> bytes:
    """The built gemv.cubin (nvcc), else stand-in bytes: the manifest only pins its sha256."""
    return built.get("gemv.cubin", b"gemv.cubin stand-in (no nvcc)")


@pytest.fixture(scope="module")
def variants(tmp_path_factory, gemv_cubin, built) -> dict[str, dict]:
    """Per preset: {"cublaslt": Result, "gemv": Result} (mined once per preset)."""
    out = {}
    for name in PRESETS:
        cap, cfg, ex, label = (ROOT / p if i < 3 else p for i, p in enumerate(PRESETS[name]))
        mined = tmp_path_factory.mktemp("mined") / f"{name}.json"
        mined.write_bytes(encode_json(mine(cap)))
        own = own_committed(ex)
        own["gemv.cubin"] = gemv_cubin
        out[name] = {g: generate(cap, cfg, mined=mined, label=label, gemm=g, own_cubins=own,
                                 command=f"uv run --frozen kern-gen {name} --gemm {g}",
                                 fuse=False)
                     for g in ("cublaslt", "gemv")}
        out[name]["fused"] = generate(cap, cfg, mined=mined, label=label, gemm="gemv",
                                      own_cubins=own, command="uv run --frozen kern-gen",
                                      fuse_norm=False)
        if "gemv_norm.cubin" in built:      # not in the examples (--fuse-norm is off)
            out[name]["normed"] = generate(
                cap, cfg, mined=mined, label=label, gemm="gemv",
                own_cubins={**own, "gemv_norm.cubin": built["gemv_norm.cubin"]},
                command="uv run --frozen kern-gen", fuse_norm=True)
    return out


def _doc(result) -> dict:
    return json.loads(result.manifest)


@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("gemm", ["cublaslt", "gemv", "fused"])
def test_both_variants_verify_clean(variants, name, gemm):
    text = variants[name][gemm].manifest.decode()
    diags = kern_manifest.verify(kern_manifest.decode(text))
    assert not diags, kern_manifest.render_human(diags, text)


@pytest.mark.parametrize("name", list(PRESETS))
def test_programs_identical_only_few_row_gemm_impls_differ(variants, name):
    a, b = _doc(variants[name]["cublaslt"]), _doc(variants[name]["gemv"])
    assert json.dumps(a["programs"]) == json.dumps(b["programs"])
    for key in ("meta", "symbols", "states", "buffers"):
        assert a[key] == b[key], key
    assert list(a["kernels"]) == list(b["kernels"])
    differ = set()
    for k, ka in a["kernels"].items():
        kb = b["kernels"][k]
        assert ka["params"] == kb["params"], k
        if ka != kb:
            differ.add(k)
            assert FEW_ROW_GEMM.match(k), f"{k}: only few-row GEMM kernels may differ"
    few = {k for k in a["kernels"] if FEW_ROW_GEMM.match(k)}
    assert differ == few and len(few) >= 10
    # the wide programs keep the one cuBLASLt kernel in both variants
    for prog in ("prefill", "batch"):
        ks = {d["kernel"] for d in a["programs"][prog]["dispatches"] if "gemm" in d["kernel"]}
        assert ks == {"gemm"}, prog
    assert a["kernels"]["gemm"] == b["kernels"]["gemm"]
    # every few-row GEMM dispatch passes the n and k its kernel is named after
    for prog in ("decode", "verify"):
        for d in a["programs"][prog]["dispatches"]:
            m = FEW_ROW_GEMM.match(d["kernel"])
            if m:
                assert m.group(1) == prog
                assert d["args"][4:] == [{"i32": int(m.group(2))}, {"i32": int(m.group(3))}]
                assert d["args"][3] == ({"i32": 1} if prog == "decode" else TOK)


@pytest.mark.parametrize("name", list(PRESETS))
def test_gemv_steps_follow_the_abi(variants, name, gemv_cubin):
    a, b = _doc(variants[name]["cublaslt"]), _doc(variants[name]["gemv"])
    sha = hashlib.sha256(gemv_cubin).hexdigest()
    for k, kern in b["kernels"].items():
        m = FEW_ROW_GEMM.match(k)
        if not m:
            continue
        n, kk = int(m.group(2)), int(m.group(3))
        (sc,) = a["kernels"][k]["impl"]["steps"]
        assert sc["symbol"] == "extern:cublaslt_bf16_tn" and "cubin" not in sc
        (st,) = kern["impl"]["steps"]
        gy = 1 if m.group(1) == "decode" else {"ceil_div": [TOK, 8]}
        # decode's GEMVs under 16 MiB trigger early (pdl_order.small_early_triggers)
        small = m.group(1) == "decode" and 2 * n * kk < SMALL_EARLY_BYTES
        assert st == {"symbol": "kern_gemv_et_bf16" if small else "kern_gemv_bf16",
                      "cubin": "gemv.cubin", "sha256": sha,
                      "params": PARAMS, "block": [32 * gemv_warps(n, kk), 1, 1],
                      "grid": [-(-n // GEMV_COLS), gy, 1], "pdl": True,
                      "args": [{"arg": i} for i in range(6)]}, k
        assert kern["params"] == PARAMS and kk % 8 == 0
    ra, rb = variants[name]["cublaslt"], variants[name]["gemv"]
    assert rb.cubins == {**ra.cubins, "gemv.cubin": gemv_cubin}
    assert "gemv.cubin" not in ra.cubins
    assert "`--gemm gemv` (the default): the few-row programs' GEMMs" in rb.readme.decode()
    assert "`--gemm cublaslt`: every GEMM" in ra.readme.decode()
    assert "Fused GEMVs" not in rb.readme.decode()
    assert "Fused GEMVs" in variants[name]["fused"].readme.decode()


LAYERS = {"llama": 30, "qwen3": 36}


def _kernels_of(doc: dict, prog: str) -> list[str]:
    return [d["kernel"] for d in doc["programs"][prog]["dispatches"]]


@pytest.mark.parametrize("name", list(PRESETS))
def test_fused_variant_saves_launches_and_follows_the_abi(variants, name, gemv_cubin):
    plain, fused = _doc(variants[name]["gemv"]), _doc(variants[name]["fused"])
    n_layers = LAYERS[name]
    # fuse_rope: every layer's rope kernels become one launch: decode 3 -> 1, verify 2 -> 1
    # (Llama) or 6 -> 1 (Qwen3: the q/k norm's variance and sin halves in kernels of their own);
    # in decode that launch is then folded into the attention (the default --attention
    # cluster-rope, kern_gen.llama.fuse_rope_attention): 3 + 1 -> 1
    in_verify = 1 if name == "llama" else 5
    for prog, saved in (("decode", 3 * n_layers), ("verify", (4 + in_verify) * n_layers)):
        a, b = _kernels_of(plain, prog), _kernels_of(fused, prog)
        rope = "rope_attention" if prog == "decode" else "rope_kv"
        assert len(a) - len(b) == saved + (n_layers if prog == "decode" else 0), prog
        assert sum(k == f"{prog}.{rope}" for k in b) == n_layers
        assert sum(".silu_mul." in k for k in a) == n_layers
        assert not any(".silu_mul." in k for k in b)
        assert sum(k.startswith(f"{prog}.gemm_silu.") for k in b) == n_layers
        assert sum(k.startswith(f"{prog}.gemm_split.") for k in b) == (
            n_layers if prog == "verify" else 0)
    for prog in ("prefill", "batch"):
        assert plain["programs"][prog] == fused["programs"][prog], prog
    sha = hashlib.sha256(gemv_cubin).hexdigest()
    from kern_gen.llama.gemm import SPLIT_PARAMS
    seen = set()
    for k, kern in fused["kernels"].items():
        m = re.fullmatch(r"(decode|verify)\.gemm_(silu|split)\.([\d+]+)x(\d+)", k)
        if not m:
            continue
        seen.add(m.group(2))
        (st,) = kern["impl"]["steps"]
        widths, kk = [int(x) for x in m.group(3).split("+")], int(m.group(4))
        gy = 1 if m.group(1) == "decode" else {"ceil_div": [TOK, 8]}
        if m.group(2) == "silu":
            (n,) = widths
            small = m.group(1) == "decode" and 4 * n * kk < SMALL_EARLY_BYTES   # gate + up rows
            want = ("kern_gemv_silu_et_bf16" if small else "kern_gemv_silu_bf16", PARAMS,
                    gemv_warps(2 * n, kk), -(-n // GEMV_COLS), 6)
        else:
            assert len(widths) == 3 and widths[0] % 16 == widths[1] % 16 == 0
            n = sum(widths)
            want = ("kern_gemv_split3_bf16", SPLIT_PARAMS, gemv_warps(n, kk),
                    -(-n // GEMV_COLS), 10)
        sym, params, nw, gx, n_args = want
        assert kern["params"] == params
        assert st == {"symbol": sym, "cubin": "gemv.cubin", "sha256": sha, "params": params,
                      "block": [32 * nw, 1, 1], "grid": [gx, gy, 1], "pdl": True,
                      "args": [{"arg": i} for i in range(n_args)]}, k
    assert seen == {"silu", "split"}


@pytest.mark.parametrize("name", list(PRESETS))
def test_norm_gemvs_follow_the_abi(variants, name, built):
    """--fuse-norm: decode's 2 norms a layer + the final one disappear; the GEMVs around them
    become ABI.md 4e steps with the block size of the GEMVs they replace; the other programs
    do not change."""
    if "normed" not in variants[name]:
        pytest.skip("nvcc not found: gemv_norm.cubin is built for this test")
    fused, normed = _doc(variants[name]["fused"]), _doc(variants[name]["normed"])
    n_layers = LAYERS[name]
    a, b = _kernels_of(fused, "decode"), _kernels_of(normed, "decode")
    assert len(a) - len(b) == 2 * n_layers + 1
    for prog in ("prefill", "verify", "batch"):
        assert fused["programs"][prog] == normed["programs"][prog], prog
    from kern_gen.llama.gemm import NORM_PARAMS, RES_PARAMS, RNORM_PARAMS
    sha = hashlib.sha256(built["gemv_norm.cubin"]).hexdigest()
    counts: dict[str, int] = {}
    disp = normed["programs"]["decode"]["dispatches"]
    # the qkv GEMVs before the attention, which reads before its wait: the early twin (4e)
    early = {d["kernel"] for d, nxt in zip(disp, disp[1:])
             if nxt["kernel"] == "decode.rope_attention"}
    for k in b:
        m = re.fullmatch(r"decode\.gemm_(norm|rnorm|rnorm_silu|res)\.(\d+)x(\d+)", k)
        if not m:
            continue
        kind, n, kk = m.group(1), int(m.group(2)), int(m.group(3))
        counts[kind] = counts.get(kind, 0) + 1
        params = {"norm": NORM_PARAMS, "res": RES_PARAMS}.get(kind, RNORM_PARAMS)
        (st,) = normed["kernels"][k]["impl"]["steps"]
        assert normed["kernels"][k]["params"] == st["params"] == params
        symbol = f"kern_gemv_{kind}{'_et' if kind == 'rnorm' and k in early else ''}_bf16"
        assert st == {"symbol": symbol, "cubin": "gemv_norm.cubin",
                      "sha256": sha, "params": params,
                      "block": [32 * gemv_warps(2 * n if kind == "rnorm_silu" else n, kk), 1, 1],
                      "grid": [-(-n // GEMV_COLS), 1, 1], "pdl": True,
                      "args": [{"arg": i} for i in range(len(params))]}, k
    assert counts == {"norm": 1, "rnorm": n_layers, "rnorm_silu": n_layers,
                      "res": 2 * n_layers}
    assert any(k.startswith("decode.gemm_rnorm.") for k in early), early


def test_abi_example_gemv_step_is_the_generators():
    """ABI.md 5's o_proj GEMV (n 2560, k 4096, `tokens` rows) is what the generator emits."""
    doc = json.loads(re.findall(r"```json\n(.*?)```", ABI.read_text(), re.S)[0])
    (st,) = doc["kernels"]["gemv"]["impl"]["steps"]
    (disp,) = [d for d in doc["programs"]["decode"]["dispatches"] if d["kernel"] == "gemv"]
    n, k = disp["args"][4]["i32"], disp["args"][5]["i32"]
    assert (n, k) == (2560, 4096) and disp["args"][3] == TOK
    assert doc["kernels"]["gemv"]["params"] == st["params"] == PARAMS
    assert st["block"] == [32 * gemv_warps(n, k), 1, 1] == [512, 1, 1]
    assert st["grid"] == [n // GEMV_COLS, {"ceil_div": [TOK, 8]}, 1]
    assert st["args"] == [{"arg": i} for i in range(6)]


@pytest.mark.parametrize("preset", ["llama", "qwen3"])
def test_bad_gemm_choice_is_one_line(tmp_path, preset):
    out = tmp_path / "out"
    r = CliRunner().invoke(app, [preset, "--gemm", "cutlass", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert r.output.splitlines() == [
        f"kern-gen {preset}: refused: --gemm `cutlass`: choose one of cublaslt, gemv, splitk, tma"]
    assert not out.exists()


def test_generate_refuses_an_unknown_impl():
    with pytest.raises(WiringError, match="GEMM implementation `x`: the generator has "
                                          "cublaslt, gemv, splitk, tma"):
        generate(ROOT / "no-capture", None, gemm="x")


@pytest.mark.skipif(NVCC is None, reason="nvcc not found: the CLI builds the own kernels")
def test_cli_gemv_writes_the_variant(tmp_path, variants):
    res = CliRunner().invoke(app, ["llama", "--gemm", "cublaslt", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "manifest.json").read_bytes() == variants["llama"]["cublaslt"].manifest
    assert not (tmp_path / "kernels" / "gemv.cubin").exists()
    # the default (gemv) is not repeated; another choice is
    assert "uv run --frozen kern-gen llama --gemm cublaslt\n" in \
        (tmp_path / "README.md").read_text()


def test_gpu_harness_uses_the_generators_block_rule():
    """kernels/tests/_own_kernels_gpu.py (run on the device without kern-gen) repeats
    gemv_warps: the two must agree."""
    import importlib.util
    path = ROOT / "packages" / "kern-gen" / "kernels" / "tests" / "_own_kernels_gpu.py"
    spec = importlib.util.spec_from_file_location("own_kernels_gpu_copy", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (mod.GEMV_COLS, mod.GEMV_ROWS) == (GEMV_COLS, 8)
    for n in (1, 16, 17, 192, 576, 960, 1024, 2560, 4096, 6144, 9728, 19456, 49152, 151936):
        for k in (8, 40, 96, 576, 1536, 2560, 4096, 9728):
            assert mod.gemv_warps(n, k) == gemv_warps(n, k), (n, k)
