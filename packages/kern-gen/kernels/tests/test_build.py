"""CPU tests of kern's own kernels: the build is reproducible, and every cubin exports exactly
the ``extern "C"`` symbols ABI.md documents, with the parameter layout its manifest example
declares.  Needs nvcc (skipped cleanly without it); no GPU."""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _own_kernels_elf import Cubin  # noqa: E402


def _load_build():
    spec = importlib.util.spec_from_file_location("kern_gen_kernels_build", KERNELS / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


build = _load_build()
NVCC = build.find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found")

ABI = (KERNELS / "ABI.md").read_text()
SLOT = {"i32": 4, "u32": 4, "f32": 4, "i64": 8, "u8": 1}


def abi_table() -> dict[str, set[str]]:
    """``{cubin: {symbols}}`` from the table at the top of ABI.md."""
    table = {}
    for line in ABI.splitlines():
        m = re.match(r"^\| `([a-z_0-9]+\.cubin)` \| (.*) \|$", line)
        if m:
            table[m.group(1)] = set(re.findall(r"`([A-Za-z_0-9]+)`", m.group(2)))
    return table


def example_manifest() -> dict:
    blocks = re.findall(r"```json\n(.*?)```", ABI, re.S)
    assert len(blocks) == 1, "ABI.md holds one example manifest"
    return json.loads(blocks[0])


def layout(params: list[str]) -> list[tuple[int, int]]:
    """Naturally aligned (offset, size) of a flat C parameter list."""
    out, off = [], 0
    for p in params:
        p = p.strip()
        size = SLOT.get(p, 8)   # buffers and pointers are 8 bytes
        off = (off + size - 1) // size * size
        out.append((off, size))
        off += size
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    if NVCC is None:
        pytest.skip("nvcc not found")
    out = tmp_path_factory.mktemp("cubins")
    return out, build.build(out, NVCC)


def test_sources_and_table_agree():
    sources = {p.stem + ".cubin" for p in build.sources()}
    assert sources == set(abi_table()), "one ABI.md table row per kernel source"


@needs_nvcc
def test_build_is_reproducible(built, tmp_path):
    out1, digests1 = built
    out2 = tmp_path / "again"
    digests2 = build.build(out2, NVCC)
    assert digests1 == digests2
    for name in digests1:
        assert (out1 / name).read_bytes() == (out2 / name).read_bytes(), name


@needs_nvcc
def test_verbose_build_gives_the_same_cubins(built, tmp_path, capsys):
    out1, digests1 = built
    assert build.main([str(tmp_path / "v"), "--verbose"]) == 0
    printed = capsys.readouterr()
    for name, digest in digests1.items():
        assert f"{digest}  {name}" in printed.out
    assert "spill" in printed.err


@needs_nvcc
def test_every_documented_symbol_is_exported_unmangled(built):
    out, _ = built
    for cubin, symbols in abi_table().items():
        funcs = Cubin.read(out / cubin).global_functions()
        assert symbols == funcs, f"{cubin}: ABI.md lists {sorted(symbols)}, cubin has {sorted(funcs)}"
        assert not any(f.startswith("_Z") for f in funcs)


@needs_nvcc
def test_example_steps_match_cubin_layouts(built):
    out, _ = built
    seen = set()
    for kname, kernel in example_manifest()["kernels"].items():
        for step in kernel["impl"]["steps"]:
            cub = Cubin.read(out / step["cubin"])
            assert step["symbol"] in cub.global_functions(), (kname, step["symbol"])
            assert cub.param_layout(step["symbol"]) == layout(step["params"]), (kname, step["symbol"])
            seen.add(step["symbol"])
    # the other head_dim variants share the layout of the documented one
    for cubin, symbols in abi_table().items():
        cub = Cubin.read(out / cubin)
        for sym in symbols - seen:
            stem = re.sub(r"_d(64|128)$", "", sym)
            if stem in TWO_STEP_PARAMS:     # the default decode pair, not in the example
                assert cub.param_layout(sym) == layout(TWO_STEP_PARAMS[stem]), sym
                continue
            if stem.startswith("kern_attn_decode_cluster_"):   # ABI.md 3a″ / 3a‴
                from kern_gen.llama.attn_cluster import CLUSTER_PARAMS, ROPE_PARAMS
                params = {"kern_attn_decode_cluster_bf16": CLUSTER_PARAMS,
                          "kern_attn_decode_cluster_rope_bf16": ROPE_PARAMS[False],
                          "kern_attn_decode_cluster_rope_norm_bf16": ROPE_PARAMS[True]}[stem]
                assert cub.param_layout(sym) == layout(params), sym
                continue
            if sym in FUSED_GEMV_PARAMS:    # ABI.md 4a / 4b, not in the example
                assert cub.param_layout(sym) == layout(FUSED_GEMV_PARAMS[sym]), sym
                continue
            if sym in ROPE_KV_PARAMS:       # ABI.md 3d/3e, not in the example
                assert cub.param_layout(sym) == layout(ROPE_KV_PARAMS[sym]), sym
                continue
            if sym in TMA_TWINS:            # ABI.md 4, 4d/4f: the parameters of its gemv.cu kernel
                gemv = Cubin.read(out / "gemv.cubin")
                assert cub.param_layout(sym) == gemv.param_layout(TMA_TWINS[sym]), sym
                continue
            if stem in PAGED_ATTENTION_PARAMS:  # ABI.md 3b′, not in the example
                assert cub.param_layout(sym) == layout(PAGED_ATTENTION_PARAMS[stem][1]), sym
                continue
            if sym == "kern_argmax_markov_bf16_partial":  # ABI.md 2a, DSpark manifests only
                from kern_gen.llama.markov import PARTIAL
                assert cub.param_layout(sym) == layout(PARTIAL), sym
                continue
            if sym == "kern_spec_accept":   # ABI.md 6, DSpark manifests only
                from kern_gen.llama.accept import IFACE
                assert cub.param_layout(sym) == layout(IFACE), sym
                continue
            if sym.startswith("kern_rmsnorm_"):  # ABI.md 4g, kern-gen --own-norm only
                from kern_gen.llama.own_norm import PARAMS as NORM, SYMBOLS
                kind = {v: k for k, v in SYMBOLS.items()}[sym]
                assert cub.param_layout(sym) == layout([*NORM[kind], "i32", "f32"]), sym
                continue
            if sym == "kern_gemv_tma_smem":  # the probe of its shared-memory sizes
                assert cub.param_layout(sym) == layout(["out buffer<i32>"]), sym
                continue
            twin = re.sub(r"_d64$", "_d128", sym)
            assert twin in seen, f"{sym} has no documented twin"
            assert cub.param_layout(sym) == cub.param_layout(twin), sym


# The rope + K/V writes of a layer (ABI.md 3d, 3d′, 3e, 3e′) exactly as kern-gen emits it (kern_gen.llama.own).
ROPE_KV_PARAMS = {
    "kern_rope_kv_bf16": ["in buffer<bf16>", "in buffer<f32>", "in buffer<i64>",
                          "out buffer<bf16>", "inout ptr", "inout ptr", "i32", "i32", "i32",
                          "i32", "i64"],
    "kern_rope_kv3_bf16": ["in buffer<bf16>", "in buffer<bf16>", "in buffer<bf16>",
                           "in buffer<f32>", "in buffer<i64>", "out buffer<bf16>", "inout ptr",
                           "inout ptr", "i32", "i32", "i32", "i32", "i64"],
    "kern_rope_kv_norm_bf16": ["in buffer<bf16>", "in buffer<bf16>", "in buffer<bf16>",
                               "in buffer<f32>", "in buffer<i64>", "out buffer<bf16>",
                               "inout ptr", "inout ptr", "i32", "i32", "i32", "i32", "i64",
                               "f32"],
    "kern_rope_kv3_norm_bf16": ["in buffer<bf16>", "in buffer<bf16>", "in buffer<bf16>",
                                "in buffer<bf16>", "in buffer<bf16>", "in buffer<f32>",
                                "in buffer<i64>", "out buffer<bf16>", "inout ptr", "inout ptr",
                                "i32", "i32", "i32", "i32", "i64", "f32"],
}

# The fused and accumulating GEMVs (ABI.md 4a, 4b, 4c) exactly as kern-gen emits them
# (kern_gen.llama.gemm).
TMA_TWINS = {"kern_gemv_et_bf16": "kern_gemv_bf16",      # ABI.md 4: its early-trigger twin
             "kern_gemv_silu_et_bf16": "kern_gemv_silu_bf16",
             "kern_gemv_tma_bf16": "kern_gemv_bf16", "kern_gemv_tma_silu_bf16":
             "kern_gemv_silu_bf16", "kern_gemv_tma_split3_bf16": "kern_gemv_split3_bf16",
             **{f"kern_gemv_{v}sk{s}_bf16": f"kern_gemv_{v}bf16"
                for s in (2, 4, 8) for v in ("", "silu_")}}

FUSED_GEMV_PARAMS = {
    "kern_gemv_silu_bf16": ["in buffer<bf16>", "in buffer<bf16>", "out buffer<bf16>", "i32",
                            "i32", "i32"],
    "kern_gemv_split3_bf16": ["in buffer<bf16>", "in buffer<bf16>", "out buffer<bf16>",
                              "out buffer<bf16>", "out buffer<bf16>", "i32", "i32", "i32",
                              "i32", "i32"],
    "kern_gemv_acc_bf16": ["in buffer<bf16>", "in buffer<bf16>", "inout buffer<bf16>", "i32",
                           "i32", "i32"],
    "kern_gemv_norm_bf16": ["in buffer<bf16>", "in buffer<bf16>", "out buffer<f32>",
                            "in buffer<bf16>", "out buffer<bf16>", "i32", "i32", "i32", "f32"],
    "kern_gemv_rnorm_bf16": ["in buffer<f32>", "in buffer<f32>", "in buffer<bf16>",
                             "in buffer<bf16>", "out buffer<bf16>", "i32", "i32", "i32", "i32",
                             "f32"],
    "kern_gemv_rnorm_et_bf16": ["in buffer<f32>", "in buffer<f32>", "in buffer<bf16>",
                                "in buffer<bf16>", "out buffer<bf16>", "i32", "i32", "i32", "i32",
                                "f32"],
    "kern_gemv_rnorm_silu_bf16": ["in buffer<f32>", "in buffer<f32>", "in buffer<bf16>",
                                  "in buffer<bf16>", "out buffer<bf16>", "i32", "i32", "i32",
                                  "i32", "f32"],
    "kern_gemv_res_bf16": ["in buffer<bf16>", "in buffer<bf16>", "inout buffer<f32>",
                           "out buffer<f32>", "i32", "i32", "i32"],
}


def test_fused_gemv_params_are_documented_and_the_generators():
    gemm = pytest.importorskip("kern_gen.llama.gemm")
    PARAMS, SPLIT_PARAMS = gemm.PARAMS, gemm.SPLIT_PARAMS
    doc_lists = {tuple(json.loads(m)) for m in re.findall(r"`(\[\"[^`]*\])`", ABI)}
    assert FUSED_GEMV_PARAMS == {"kern_gemv_silu_bf16": PARAMS,
                                 "kern_gemv_split3_bf16": SPLIT_PARAMS,
                                 "kern_gemv_acc_bf16": gemm.ACC_PARAMS,
                                 "kern_gemv_norm_bf16": gemm.NORM_PARAMS,
                                 "kern_gemv_rnorm_bf16": gemm.RNORM_PARAMS,
                                 "kern_gemv_rnorm_et_bf16": gemm.RNORM_PARAMS,
                                 "kern_gemv_rnorm_silu_bf16": gemm.RNORM_PARAMS,
                                 "kern_gemv_res_bf16": gemm.RES_PARAMS}
    for params in FUSED_GEMV_PARAMS.values():
        assert tuple(params) in doc_lists


def test_own_norm_params_are_documented_as_the_generator_emits_them():
    own_norm = pytest.importorskip("kern_gen.llama.own_norm")
    doc_lists = {tuple(json.loads(m)) for m in re.findall(r"`(\[\"[^`]*\])`", ABI)}
    for kind, symbol in own_norm.SYMBOLS.items():
        assert (*own_norm.PARAMS[kind], "i32", "f32") in doc_lists, symbol
        assert f"`{symbol}`" in ABI


# The paged attention ABI (issue 20) exactly as kern-gen emits it, per symbol stem (both
# head dims): a change here is a change of the generator's contract.
PAGED_ATTENTION_PARAMS = {
    "kern_attn_decode_bf16": (
        "attn_decode.cubin",
        ["in buffer<bf16>", "in ptr", "in ptr", "in buffer<i32>", "in buffer<i32>",
         "out buffer<bf16>", "out buffer<f32>", "out buffer<f32>", "out buffer<u32>", "i32",
         "i64", "i64", "i64", "i64", "i32", "i32", "f32", "i32", "i32"]),
    "kern_attn_prefill_bf16": (
        "attn_prefill.cubin",
        ["in buffer<bf16>", "in ptr", "in ptr", "in buffer<i32>", "in buffer<i32>",
         "out buffer<bf16>", "i32", "i64", "i64", "i64", "i64", "i32", "i32", "i32", "f32"]),
    "kern_attn_rows_partial_bf16": (          # ABI.md 3b′ (kern-gen --verify-attention rows)
        "attn_prefill.cubin",
        ["in buffer<bf16>", "in ptr", "in ptr", "in buffer<i32>", "in buffer<i32>",
         "out buffer<f32>", "out buffer<f32>", "i32", "i64", "i64", "i64", "i64", "i32", "i32",
         "f32", "i32", "i32", "i32"]),
}
PAGED_ATTENTION_INTERFACES = [
    ["in buffer<bf16>", "in ptr", "in ptr", "in buffer<i32>", "in buffer<i32>",
     "out buffer<bf16>"],                                        # decode: ..., kv_lens, table, out
    ["in buffer<bf16>", "in ptr", "in ptr", "in buffer<i32>", "in buffer<i32>",
     "out buffer<bf16>", "i32"],                                 # prefill: ..., pos0, table, out, T
]


@needs_nvcc
@pytest.mark.parametrize("stem", sorted(PAGED_ATTENTION_PARAMS))
@pytest.mark.parametrize("d", [64, 128])
def test_paged_attention_symbols_have_the_generator_layout(built, stem, d):
    out, _ = built
    cubin, params = PAGED_ATTENTION_PARAMS[stem]
    assert Cubin.read(out / cubin).param_layout(f"{stem}_d{d}") == layout(params)


# The two-launch decode (attn_decode_split.cu, the generator's default decode attention) that
# the GPU tests also compare the one-launch kernel with, bit for bit.
TWO_STEP_PARAMS = {
    "kern_attn_decode_partial_bf16": [
        "in buffer<bf16>", "in ptr", "in ptr", "in buffer<i32>", "in buffer<i32>",
        "out buffer<f32>", "out buffer<f32>", "i32", "i64", "i64", "i64", "i64", "i32", "i32",
        "f32", "i32", "i32"],
    "kern_attn_decode_reduce_bf16": [
        "in buffer<f32>", "in buffer<f32>", "in buffer<i32>", "out buffer<bf16>", "i32", "i32",
        "i32"],
}


@needs_nvcc
def test_two_launch_decode_builds_with_its_layouts(tmp_path):
    cub = Cubin.read(build.build_one(NVCC, KERNELS / "attn_decode_split.cu", tmp_path))
    assert cub.global_functions() == {f"{stem}_d{d}" for stem in TWO_STEP_PARAMS
                                      for d in (64, 128)}
    for stem, params in TWO_STEP_PARAMS.items():
        for d in (64, 128):
            assert cub.param_layout(f"{stem}_d{d}") == layout(params)


def test_paged_attention_abi_is_documented():
    """ABI.md states each step's list and each interface, and its example uses them."""
    doc_lists = {tuple(json.loads(m)) for m in re.findall(r"`(\[\"[^`]*\])`", ABI)}
    for _, params in PAGED_ATTENTION_PARAMS.values():
        assert tuple(params) in doc_lists
    for iface in PAGED_ATTENTION_INTERFACES:
        assert tuple(iface) in doc_lists
    kernels = example_manifest()["kernels"]
    assert [kernels["attn_decode"]["params"], kernels["attn_prefill"]["params"]] == \
        PAGED_ATTENTION_INTERFACES


def test_documented_param_lists_match_example():
    """The bracketed parameter lists in the prose equal the example's step params."""
    doc_lists = {tuple(json.loads(m)) for m in re.findall(r"^`(\[\"[^`]*\])`", ABI, re.M)}
    steps = {tuple(s["params"]) for k in example_manifest()["kernels"].values()
             for s in k["impl"]["steps"]}
    assert steps <= doc_lists


def test_example_manifest_verifies_clean():
    km = pytest.importorskip("kern_manifest")
    text = re.findall(r"```json\n(.*?)```", ABI, re.S)[0]
    diags = km.verify(km.decode(text))
    assert not diags, km.render_human(diags, text)
