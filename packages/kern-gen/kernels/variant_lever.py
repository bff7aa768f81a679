#!/usr/bin/env python3
"""A lever manifest from a variant build of the own kernels: ``build.py --define …`` into a
temporary folder, then ``kern-gen <preset>`` with those cubins, written to OUT (manifest,
kernels, plan, README).  For measuring a compile-time switch of an own kernel end to end
(``kern-run bench --lever CASE:LABEL=OUT``) before it becomes the build's default.

    python3 packages/kern-gen/kernels/variant_lever.py OUT --preset qwen3 \\
        -D NAME=VALUE [--gemm splitk] [--set gemm_splitk.MIN_BYTES=0]

(Session 23's ``-D KERN_GEMV_PREWAIT=1`` was measured this way and became the code in
session 24.)

Needs nvcc and kern-gen importable (PYTHONPATH with packages/*/src).  The README it writes
names the variant; such a folder is a lever, never an example.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--preset", choices=("llama", "qwen3"), required=True)
    ap.add_argument("--define", "-D", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--gemm", default=None, help="kern-gen --gemm (default: its default)")
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=INT",
                    help="an integer constant of a kern_gen.llama module for this lever only "
                         "(e.g. gemm_splitk.MIN_BYTES=0; session 29 set the removed stream "
                         "GEMV's cluster count this way)")
    args = ap.parse_args(argv)
    import importlib
    for item in args.set:
        name, _, value = item.partition("=")
        module, _, const = name.rpartition(".")
        mod = importlib.import_module(f"kern_gen.llama.{module}")
        if not hasattr(mod, const):
            ap.error(f"--set {item}: kern_gen.llama.{module} has no {const}")
        setattr(mod, const, int(value))

    from kern_gen.llama import generate
    from kern_gen.llama.command import PRESETS
    from kern_gen.llama.pipeline import _build_own, write

    own = _build_own(None, defines=tuple(args.define))
    cap, cfg, _, label = PRESETS[args.preset]
    flags = " ".join([*(f"-D {d}" for d in args.define), *(f"--set {x}" for x in args.set)])
    gemm = {"gemm": args.gemm} if args.gemm else {}
    command = (f"python3 packages/kern-gen/kernels/variant_lever.py OUT --preset {args.preset} "
               f"{flags}" + (f" --gemm {args.gemm}" if args.gemm else ""))
    r = generate(ROOT / cap, ROOT / cfg, label=f"{label} [variant: {flags}]", command=command,
                 own_cubins=own, **gemm)
    write(r, args.out)
    print(f"wrote {args.out}/manifest.json ({len(r.cubins)} cubins; own kernels built with "
          f"{flags or 'no defines'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
