"""Manifests for the GPU tests, built around the kernels in ``tests/cu/`` (plain dicts, so a
test can break one field and see the error). Also used by the benchmark script."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

CU_DIR = Path(__file__).parent / "cu"
MAX_TOKENS = 64
CAPACITY = 64           # tokens the state holds
REGION = CAPACITY * 32  # bytes of one state region (8 f32 per token)

F32 = "in buffer<f32>"
N = {"mul": [{"sym": "tokens"}, 16]}   # elements in a [tokens, 16] buffer


def nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    p = Path("/usr/local/cuda/bin/nvcc")
    return str(p) if p.exists() else None


def build_cubins(out_dir: Path, names=("main", "dup_a", "dup_b")) -> dict[str, str]:
    """Compile tests/cu/<name>.cu to out_dir/<name>.cubin for sm_90; sha256 per file."""
    exe = nvcc()
    if exe is None:
        raise RuntimeError("nvcc not found")
    out_dir.mkdir(parents=True, exist_ok=True)
    shas = {}
    for n in names:
        dst = out_dir / f"{n}.cubin"
        subprocess.run([exe, "-cubin", "-arch=sm_90", "-O3", "-o", str(dst), str(CU_DIR / f"{n}.cu")],
                       check=True, capture_output=True)
        shas[f"{n}.cubin"] = hashlib.sha256(dst.read_bytes()).hexdigest()
    return shas


def _step(symbol, params, grid, block, args, **extra):
    s = {"symbol": symbol, "params": params, "grid": grid, "block": block, "args": args}
    s.update(extra)
    return s


def _ident(n):
    return [{"arg": i} for i in range(n)]


def features(main_sha: str) -> dict:
    """Every feature but the externs: a two-step impl with scratch and offsets (pinned with
    sha256), every literal type incl. u8, state regions at offsets, a carry between two
    programs, grid expressions, > 48 KB dynamic shared memory, and two same-named functions
    in different modules told apart by layout (unpinned)."""
    buf16 = lambda cls: {"dtype": "f32", "shape": ["tokens", 16], "class": cls}  # noqa: E731
    kernels = {
        "twostep": {
            "params": [F32, F32, "out buffer<f32>", "i32"],
            "impl": {
                "scratch": {"tmp": {"dtype": "f32", "shape": [80, 16]}},
                "steps": [
                    _step("mul_w", [F32, F32, "out buffer<f32>", "i32"],
                          [{"ceil_div": [N, 128]}, 1, 1], [128, 1, 1],
                          [{"arg": 0}, {"arg": 1}, {"scratch": "tmp", "offset": 256}, {"arg": 3}],
                          cubin="main.cubin", sha256=main_sha),
                    _step("add_bias", [F32, "out buffer<f32>", "i32", "f32"],
                          [{"ceil_div": [N, 64]}, 1, 1], [64, 1, 1],
                          [{"scratch": "tmp", "offset": 256}, {"arg": 2}, {"arg": 3}, {"f32": 0.5}],
                          cubin="main.cubin", sha256=main_sha),
                ]}},
        "record": {
            "params": ["u8", "i64", "f32", "out buffer<i64>"],
            "impl": {"steps": [_step(
                "record", ["u8", "i64", "f32", "out buffer<i64>", "u32", "i32", "u8", "i64"],
                [1, 1, 1], [1, 1, 1],
                _ident(4) + [{"u32": 4000000000}, {"i32": -123456}, {"u8": 7},
                             {"i64": -9000000000000}])]}},
        "stwrite": {
            "params": [F32, "inout ptr", "i32", "i32"],
            "impl": {"steps": [_step("state_write", [F32, "inout ptr", "i32", "i32"],
                                     [{"sym": "tokens"}, 1, 1], [32, 1, 1], _ident(4))]}},
        "stread": {
            "params": ["in ptr", "out buffer<f32>", "i32", "i32"],
            "impl": {"steps": [_step("state_read", ["in ptr", "out buffer<f32>", "i32", "i32"],
                                     [{"sym": "tokens"}, 1, 1], [32, 1, 1], _ident(4))]}},
        "affine": {
            "params": [F32, "out buffer<f32>", "i32", "f32", "f32"],
            "impl": {"steps": [_step("affine", [F32, "out buffer<f32>", "i32", "f32", "f32"],
                                     [{"ceil_div": [N, 256]}, 1, 1], [256, 1, 1], _ident(5))]}},
        "bigsmem": {
            "params": [F32, "out buffer<f32>", "i32"],
            "impl": {"steps": [_step("smem_reverse", [F32, "out buffer<f32>", "i32"],
                                     [1, 1, 1], [256, 1, 1], _ident(3), shared_mem=65536)]}},
        "dupa": {
            "params": ["out buffer<f32>", "i32"],
            "impl": {"steps": [_step("dup", ["out buffer<f32>", "i32"],
                                     [{"ceil_div": [N, 128]}, 1, 1], [128, 1, 1], _ident(2))]}},
        "dupb": {
            "params": ["out buffer<f32>", "i64", "f32"],
            "impl": {"steps": [_step("dup", ["out buffer<f32>", "i64", "f32"],
                                     [{"ceil_div": [N, 128]}, 1, 1], [128, 1, 1], _ident(3))]}},
        "gridid": {
            "params": ["out buffer<i32>", "i32"],
            "impl": {"steps": [_step("grid_id", ["out buffer<i32>", "i32"],
                                     [{"ceil_div": [N, 32]}, 1, 1], [32, 1, 1], _ident(2))]}},
    }
    n = {"expr": N}
    main = [
        {"label": "twostep", "kernel": "twostep", "args": [{"buf": "x"}, {"buf": "w"}, {"buf": "y"}, n]},
        {"label": "record", "kernel": "record",
         "args": [{"u8": 200}, {"expr": {"mul": [{"sym": "tokens"}, 1000000000000]}},
                  {"f32": -1.25}, {"buf": "lit"}]},
        {"label": "st.w0", "kernel": "stwrite",
         "args": [{"buf": "x"}, {"state": "st"}, {"sym": "tokens"}, {"i32": 0}]},
        {"label": "st.w1", "kernel": "stwrite",
         "args": [{"buf": "x"}, {"state": "st", "offset": REGION}, {"sym": "tokens"}, {"i32": 8}]},
        {"label": "st.r0", "kernel": "stread",
         "args": [{"state": "st"}, {"buf": "sval"}, {"sym": "tokens"}, {"i32": 0}]},
        {"label": "st.r1", "kernel": "stread",
         "args": [{"state": "st", "offset": REGION}, {"buf": "sval"}, {"sym": "tokens"}, {"i32": 8}]},
        {"label": "bigsmem", "kernel": "bigsmem", "args": [{"buf": "x"}, {"buf": "big"}, n]},
        {"label": "dupa", "kernel": "dupa", "args": [{"buf": "da"}, n]},
        {"label": "dupb", "kernel": "dupb", "args": [{"buf": "db"}, n, {"f32": 2.5}]},
        {"label": "gridid", "kernel": "gridid", "args": [{"buf": "g"}, n]},
    ]
    return {
        "meta": {"version": 2, "model": "kern-runtime-gpu-test"},
        "symbols": {"tokens": {"max": MAX_TOKENS}},
        "states": {"st": {"bytes_per_token": 64}},
        "buffers": {
            "x": buf16("input"), "w": {"dtype": "f32", "shape": [16], "class": "weight"},
            "y": buf16("output"), "lit": {"dtype": "i64", "shape": [8], "class": "output"},
            "sval": buf16("output"), "big": buf16("output"), "da": buf16("output"),
            "db": buf16("output"), "g": {"dtype": "i32", "shape": ["tokens", 16], "class": "output"},
            "c": buf16("carry"), "z": buf16("output"),
        },
        "kernels": kernels,
        "programs": {
            "main": {"dispatches": main},
            "produce": {"dispatches": [{"label": "produce", "kernel": "affine", "args": [
                {"buf": "x"}, {"buf": "c"}, n, {"f32": 2.0}, {"f32": 1.0}]}]},
            "consume": {"dispatches": [{"label": "consume", "kernel": "affine", "args": [
                {"buf": "c"}, {"buf": "z"}, n, {"f32": 1.0}, {"f32": 1.0}]}]},
        },
    }


GEMM = ["in buffer<bf16>", "in buffer<bf16>", "out buffer<bf16>", "i32", "i32", "i32"]
GEMM_ACC = ["in buffer<bf16>", "in buffer<bf16>", "inout buffer<bf16>", "i32", "i32", "i32"]


def gemm(n: int = 384, k: int = 256, max_m: int = 64) -> dict:
    """c1 = a·w1ᵀ; c2 = a·w1ᵀ then += a·w2ᵀ where w2 is a view 2 bytes into ``wcat`` (an
    operand only 2-byte aligned)."""
    ext = lambda sym, params: {"params": params, "impl": {"steps": [_step(  # noqa: E731
        sym, params, [1, 1, 1], [1, 1, 1], _ident(6))]}}
    mnk = [{"sym": "m"}, {"i32": n}, {"i32": k}]
    return {
        "meta": {"version": 2, "model": "kern-runtime-gemm-test"},
        "symbols": {"m": {"max": max_m}},
        "buffers": {
            "a": {"dtype": "bf16", "shape": ["m", k], "class": "input"},
            "w1": {"dtype": "bf16", "shape": [n, k], "class": "weight"},
            "wcat": {"dtype": "bf16", "shape": [n * k + 8], "class": "weight"},
            "c1": {"dtype": "bf16", "shape": ["m", n], "class": "output"},
            "c2": {"dtype": "bf16", "shape": ["m", n], "class": "output"},
        },
        "kernels": {"gemm": ext("extern:cublaslt_bf16_tn", GEMM),
                    "gemm_acc": ext("extern:cublaslt_bf16_tn_acc", GEMM_ACC)},
        "programs": {"main": {"dispatches": [
            {"label": "c1", "kernel": "gemm", "args": [{"buf": "a"}, {"buf": "w1"}, {"buf": "c1"}, *mnk]},
            {"label": "c2", "kernel": "gemm", "args": [{"buf": "a"}, {"buf": "w1"}, {"buf": "c2"}, *mnk]},
            {"label": "c2+", "kernel": "gemm_acc",
             "args": [{"buf": "a"}, {"buf": "wcat", "offset": 2}, {"buf": "c2"}, *mnk]},
        ]}},
    }
