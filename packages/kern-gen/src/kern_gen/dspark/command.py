"""``kern-gen dspark``: thin; the target presets of ``kern-gen llama``/``qwen3`` plus the
draft's ``dspark.json``; one line on a refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from kern_manifest import KernError, fail

from ..llama import repo
from ..llama.command import PRESETS, VERIFY_ATTENTION_HELP, VERIFY_SPLITS_HELP, _below_cwd
from ..llama.errors import WiringError
from ..llama.gemm import DEFAULT_ACC, DEFAULT_GEMM, GEMM_IMPLS
from ..llama.own import DEFAULT_VERIFY_ATTENTION, DEFAULT_VERIFY_SPLITS
from ..llama.pipeline import write
from .generate import generate

TARGETS = {
    "llama": ("examples/smollm2-135m-dspark", "smollm2-135m + DSpark (kern-gen dspark llama)"),
    "qwen3": ("examples/qwen3-4b-dspark", "qwen3-4b + DSpark (kern-gen dspark qwen3)"),
}


def dspark_command(
    target: Annotated[str, typer.Argument(help="target family preset: llama (the bundled "
                                          "SmolLM2-135M capture) or qwen3 (the Qwen3-4B-shaped "
                                          "capture)")],
    draft: Annotated[Optional[Path], typer.Option(help="the draft's dspark.json (default: "
                                                  "OUT/dspark.json)")] = None,
    out: Annotated[Optional[Path], typer.Option(help="output directory (default: "
                                                "examples/<target>-dspark)")] = None,
    capture: Annotated[Optional[Path], typer.Option(help="capture directory (default: the "
                                                    "preset's)")] = None,
    config: Annotated[Optional[Path], typer.Option(help="target config.json (default: the "
                                                   "preset's)")] = None,
    nvcc: Annotated[Optional[str], typer.Option(help="nvcc for the own kernels")] = None,
    gemm: Annotated[str, typer.Option(help="GEMM implementation of the few-row programs "
                                      "(cublaslt, gemv, splitk or tma)")] = DEFAULT_GEMM,
    fuse: Annotated[bool, typer.Option("--fuse/--no-fuse", help="with --gemm gemv, splitk or "
                                       "tma: fusions in the few-row programs (rope + K/V writes, "
                                       "the fused GEMVs)")] = True,
    gemm_acc: Annotated[str, typer.Option(help="accumulating GEMMs (the taps) of the "
                                          "few-row programs: cublaslt (the β = 1 extern) or "
                                          "gemv (kern's own kern_gemv_acc_bf16)")]
        = DEFAULT_ACC,
    verify_splits: Annotated[str, typer.Option(help=VERIFY_SPLITS_HELP)] = DEFAULT_VERIFY_SPLITS,
    verify_attention: Annotated[str, typer.Option(help=VERIFY_ATTENTION_HELP)]
        = DEFAULT_VERIFY_ATTENTION,
) -> None:
    """Generate a target manifest with a DSpark draft in it (eight programs: docs/dspark.md)."""
    try:
        if target not in TARGETS:
            raise WiringError(f"target `{target}`: choose one of {', '.join(TARGETS)}")
        if gemm not in GEMM_IMPLS:
            raise WiringError(f"--gemm `{gemm}`: choose one of {', '.join(sorted(GEMM_IMPLS))}")
        cap0, cfg0, _, _ = PRESETS[target]
        out0, label = TARGETS[target]
        out = repo.find(out0, "output directory", must_exist=False) if out is None else out
        draft = out / "dspark.json" if draft is None else draft
        repo.given(draft, "draft config (dspark.json)")
        capture = repo.find(cap0, "capture") if capture is None else repo.given(capture,
                                                                                "capture")
        config = repo.find(cfg0, "config") if config is None else repo.given(config, "config")
        extra = (f" --gemm {gemm}" if gemm != DEFAULT_GEMM else "") + ("" if fuse else
                                                                        " --no-fuse")
        extra += f" --gemm-acc {gemm_acc}" if gemm_acc != DEFAULT_ACC else ""
        extra += (f" --verify-splits {verify_splits}"
                  if verify_splits != DEFAULT_VERIFY_SPLITS else "")
        extra += (f" --verify-attention {verify_attention}"
                  if verify_attention != DEFAULT_VERIFY_ATTENTION else "")
        r = generate(capture, config, draft, label=label, nvcc=nvcc, gemm=gemm, fuse=fuse,
                     gemm_acc=gemm_acc, verify_splits=verify_splits,
                     verify_attention=verify_attention,
                     command=f"uv run --frozen kern-gen dspark {target}{extra}")
    except KernError as exc:
        fail("kern-gen dspark", exc)
    write(r, out)
    print(f"wrote {_below_cwd(Path(out).resolve())}/manifest.json ({len(r.cubins)} cubins, "
          f"export-plan.json, README.md)")
