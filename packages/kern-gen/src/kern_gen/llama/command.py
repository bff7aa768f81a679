"""Thin Typer commands: ``kern-gen llama`` (default: the bundled SmolLM2-135M capture) and
``kern-gen qwen3`` (default: the Qwen3-4B-shaped capture).  Paths default to the repository
layout, relative to the current directory (run from the repository root)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from kern_manifest import KernError, fail

from .generate import generate, write

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
    ) -> None:
        try:
            r = generate(capture, config, mined=mined, sidecar=sidecar, tokens_max=tokens_max,
                         label=label, command=f"uv run --frozen kern-gen {preset}", nvcc=nvcc)
        except KernError as exc:  # a falsified fact, or a capture that cannot be read
            fail(f"kern-gen {preset}", exc)
        write(r, out)
        print(f"wrote {out}/manifest.json ({len(r.cubins)} cubins, export-plan.json, README.md)")

    cmd.__doc__ = (f"Generate the {preset} manifest, kernels directory and export plan from a "
                   f"capture (asserting every mined fact first).")
    return cmd


llama_command = _make("llama")
qwen3_command = _make("qwen3")
