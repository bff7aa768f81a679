"""Thin Typer commands: ``kern-gen llama`` (default: the bundled SmolLM2-135M capture) and
``kern-gen qwen3`` (default: the Qwen3-4B-shaped capture).  The default paths are files of the
kern checkout, relative to its root and found wherever the tool is run from (:mod:`.repo`);
paths given as options are taken as given.  A missing input is refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from kern_manifest import KernError, fail

from . import repo
from .errors import WiringError
from .fuse_norm import DEFAULT_FUSE_NORM
from .gemm import DEFAULT_GEMM, GEMM_IMPLS
from .own import (DECODE_ATTENTION, DEFAULT_ATTENTION, DEFAULT_VERIFY_ATTENTION,
                  DEFAULT_VERIFY_SPLITS)
from .pipeline import generate, write

PRESETS = {
    "llama": ("tests/fixtures/captures/smollm2-135m", "examples/smollm2-135m/config.json",
              "examples/smollm2-135m", "smollm2-135m (llama; kern-gen llama)"),
    "qwen3": ("tests/fixtures/captures/qwen3-4b-random", "examples/qwen3-4b/config.json",
              "examples/qwen3-4b", "qwen3-4b (qwen3; kern-gen qwen3)"),
}


def _make(preset: str):
    cap0, cfg0, out0, label0 = PRESETS[preset]

    def cmd(
        capture: Annotated[Path, typer.Option(help="capture directory (with "
                                              "provider-sidecar.json)")] = Path(cap0),
        config: Annotated[Path, typer.Option(help="model config (HF config.json keys)")]
            = Path(cfg0),
        out: Annotated[Path, typer.Option(help="output directory")] = Path(out0),
        mined: Annotated[Optional[Path], typer.Option(help="kern-mine JSON (default: mine "
                                                      "the capture)")] = None,
        sidecar: Annotated[Optional[Path], typer.Option(help="provider sidecar (default: "
                                                        "CAPTURE/provider-sidecar.json)")]
            = None,
        tokens_max: Annotated[Optional[int], typer.Option(help="tokens.max (default: the "
                                                          "captured cache length)")] = None,
        label: Annotated[str, typer.Option(help="meta.model")] = label0,
        nvcc: Annotated[Optional[str], typer.Option(help="nvcc for the own kernels")] = None,
        gemm: Annotated[str, typer.Option(help="GEMM implementation of the few-row programs "
                                          "(decode, verify): cublaslt (the runtime's cuBLASLt "
                                          "extern), gemv (kern's own GEMV kernel, "
                                          "kernels/gemv.cu), splitk (the same with k split "
                                          "over a thread-block cluster for the shapes that "
                                          "leave SMs idle, kernels/gemv_splitk.cu) or tma "
                                          "(its bulk-copy form, "
                                          "kernels/gemv_tma.cu); prefill and batch always use "
                                          "cuBLASLt; the programs are the same either way")]
            = DEFAULT_GEMM,
        attention: Annotated[str, typer.Option(help="decode/verify/batch attention: split "
                                               "(two launches: split partials, then their "
                                               "merge), one-launch (the last split block "
                                               "merges), cluster (decode's 8 splits merge "
                                               "in a thread-block cluster; verify and batch "
                                               "keep split) or cluster-rope (the default: "
                                               "cluster with each decode layer's rope and "
                                               "K/V writes folded in); prefill always uses "
                                               "the flash kernel")] = DEFAULT_ATTENTION,
        fuse: Annotated[bool, typer.Option("--fuse/--no-fuse", help="with --gemm gemv, splitk "
                                           "or tma: fusions "
                                           "in the few-row programs: a Llama layer's rope + "
                                           "K/V writes in one launch, gate/up + "
                                           "SiLU*mul in one, verify's q/k/v in one")]
            = True,
        fuse_norm: Annotated[bool, typer.Option("--fuse-norm/--no-fuse-norm",
                                                help=FUSE_NORM_HELP)] = DEFAULT_FUSE_NORM,
        own_norm: Annotated[Optional[bool], typer.Option("--own-norm/--no-own-norm",
                                                         help=OWN_NORM_HELP)] = None,
        verify_splits: Annotated[str, typer.Option(help=VERIFY_SPLITS_HELP)]
            = DEFAULT_VERIFY_SPLITS,
        verify_attention: Annotated[str, typer.Option(help=VERIFY_ATTENTION_HELP)]
            = DEFAULT_VERIFY_ATTENTION,
    ) -> None:
        shown = out
        try:
            _check_cli_choices(gemm, attention)
            capture, config, out = _paths(preset, capture, config, out)
            if shown == Path(out0):
                shown = _below_cwd(out)
            for given, what in ((mined, "kern-mine JSON"), (sidecar, "provider sidecar")):
                if given is not None:
                    repo.given(given, what)
            r = generate(capture, config, mined=mined, sidecar=sidecar, tokens_max=tokens_max,
                         label=label,
                         command=_command(preset, gemm, attention, fuse, verify_splits,
                                          verify_attention, fuse_norm, own_norm),
                         nvcc=nvcc, gemm=gemm, attention=attention, fuse=fuse,
                         fuse_norm=fuse_norm, own_norm=own_norm,
                         verify_splits=verify_splits, verify_attention=verify_attention)
        except KernError as exc:  # a falsified fact, or a capture that cannot be read
            fail(f"kern-gen {preset}", exc)
        write(r, out)
        print(f"wrote {shown}/manifest.json ({len(r.cubins)} cubins, export-plan.json, "
              f"README.md)")

    cmd.__doc__ = (f"Generate the {preset} manifest, kernels directory and export plan from a "
                   f"capture (asserting every mined fact first).")
    return cmd


def _check_cli_choices(gemm: str, attention: str) -> None:
    if gemm not in GEMM_IMPLS:
        raise WiringError(f"--gemm `{gemm}`: choose one of {', '.join(sorted(GEMM_IMPLS))}")
    if attention not in DECODE_ATTENTION:
        raise WiringError(f"--attention `{attention}`: choose one of "
                          f"{', '.join(DECODE_ATTENTION)}")


FUSE_NORM_HELP = ("with --gemm gemv and --fuse: every RMSNorm of decode (with its "
                  "residual adds) split between the GEMVs around it, no norm launch (the "
                  "GEMM before it keeps an f32 residual stream and sums of squares, the "
                  "GEMV after it normalises); off by default: not faster")


OWN_NORM_HELP = ("with an own GEMV and --fuse: every RMSNorm of decode (with its residual "
                 "adds) one launch of kern's own kernel over an f32 residual stream, which "
                 "lets the next GEMV launch and stream its weights while it runs (the "
                 "captured norms let it launch only after their last store); default: on "
                 "for qwen3 (faster on the H200), off for llama (no gain), never with an "
                 "extension or --fuse-norm")


VERIFY_SPLITS_HELP = ("key splits of the split-KV attention in verify and the DSpark draft: "
                      "divided (a row gets s_min / rows splits), decode (every row splits "
                      "its keys as a decode row would) or N (every row at least N splits)")


VERIFY_ATTENTION_HELP = ("attention kernel of verify and the DSpark draft: split (the "
                         "CUDA-core split-KV partial, a block per row), rows (the "
                         "tensor-core partial, a block for all rows of a split) or "
                         "verify-rows (rows in verify, split in the draft)")


def _command(preset: str, gemm: str, attention: str = DEFAULT_ATTENTION, fuse: bool = True,
             verify_splits: str = DEFAULT_VERIFY_SPLITS,
             verify_attention: str = DEFAULT_VERIFY_ATTENTION,
             fuse_norm: bool = DEFAULT_FUSE_NORM, own_norm: bool | None = None) -> str:
    """The command the README says regenerates the example (options that are not default)."""
    extra = f" --gemm {gemm}" if gemm != DEFAULT_GEMM else ""
    extra += f" --attention {attention}" if attention != DEFAULT_ATTENTION else ""
    extra += "" if fuse else " --no-fuse"
    extra += "" if fuse_norm == DEFAULT_FUSE_NORM else (
        " --fuse-norm" if fuse_norm else " --no-fuse-norm")
    extra += {True: " --own-norm", False: " --no-own-norm"}.get(own_norm, "")
    extra += (f" --verify-splits {verify_splits}" if verify_splits != DEFAULT_VERIFY_SPLITS
              else "")
    extra += (f" --verify-attention {verify_attention}"
              if verify_attention != DEFAULT_VERIFY_ATTENTION else "")
    return f"uv run --frozen kern-gen {preset}{extra}"


def _paths(preset: str, capture: Path, config: Path, out: Path) -> tuple[Path, Path, Path]:
    """The preset's defaults resolved in the checkout (inputs must exist there); options
    given otherwise: the inputs must exist."""
    cap0, cfg0, out0, _ = PRESETS[preset]
    capture = (repo.find(cap0, "capture") if capture == Path(cap0)
               else repo.given(capture, "capture"))
    config = repo.find(cfg0, "config") if config == Path(cfg0) else repo.given(config, "config")
    out = repo.find(out0, "output directory", must_exist=False) if out == Path(out0) else out
    return capture, config, out


def _below_cwd(p: Path) -> Path:
    """``p`` relative to the current directory when below it (as the default reads)."""
    try:
        return p.relative_to(Path.cwd().resolve())
    except ValueError:
        return p


llama_command = _make("llama")
qwen3_command = _make("qwen3")
