#!/usr/bin/env python3
"""Build kern's own CUDA kernels into cubins, reproducibly.

    python3 build.py OUT_DIR [--nvcc PATH] [--verbose] [--define NAME=VALUE ...]

Compiles every ``*.cu`` beside this file (with the ``*.cuh`` headers beside it, which the
sources ``#include``) with fixed flags into ``OUT_DIR/<name>.cubin`` and
prints ``<sha256>  <name>.cubin`` for each.  Standard library only.

Reproducibility: nvcc runs in a fresh temporary directory of a fixed name pattern, on a copy
of the source under a fixed file name, with no debug or line information, so neither the
checkout path nor the time of day can reach the cubin.  Building twice gives identical bytes
(the CPU test checks it).  ``--define`` adds ``-D`` flags for a lever's variant build (a macro a kernel source
tests; ``kernels/variant_lever.py`` makes a manifest of it); the generator and the examples
use the plain build.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Fixed flags (``-cubin -arch=sm_90 -O3``) plus the ones that keep the output stable.
NVCC_FLAGS = [
    "-cubin",
    "-arch=sm_90",
    "-O3",
    "-std=c++17",
    "-Xptxas=-O3",
]


def sources() -> list[Path]:
    """The kernel sources, one per kernel family (sorted by name)."""
    return sorted(HERE.glob("*.cu"))


def find_nvcc(explicit: str | None = None) -> str | None:
    if explicit:
        return explicit
    found = shutil.which("nvcc")
    if found:
        return found
    for cand in ("/usr/local/bin/nvcc", "/usr/local/cuda/bin/nvcc"):
        if os.access(cand, os.X_OK):
            return cand
    return None


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_one(nvcc: str, src: Path, out_dir: Path, verbose: bool = False,
              defines: tuple[str, ...] = ()) -> Path:
    """Compile one source to ``out_dir/<stem>.cubin`` (``defines``: extra ``-D`` macros) and
    return the path."""
    out = out_dir / f"{src.stem}.cubin"
    with tempfile.TemporaryDirectory(prefix="kern-gen-kernels-") as tmp:
        work = Path(tmp)
        # a fixed file name and working directory: nothing path-dependent can leak in
        (work / "kernel.cu").write_bytes(src.read_bytes())
        for header in sorted(HERE.glob("*.cuh")):   # shared device code, #include "x.cuh"
            (work / header.name).write_bytes(header.read_bytes())
        env = dict(os.environ)
        env["LC_ALL"] = "C"
        env["SOURCE_DATE_EPOCH"] = "0"
        cmd = [nvcc, *NVCC_FLAGS, *(f"-D{d}" for d in defines), "kernel.cu", "-o",
               "kernel.cubin"]
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed on {src.name}:\n{proc.stdout}{proc.stderr}")
        if verbose:
            # ptxas records its options in the cubin: the -v report comes from a separate,
            # discarded compile so that the pinned cubin never depends on --verbose.
            rep = subprocess.run([nvcc, *NVCC_FLAGS, *(f"-D{d}" for d in defines),
                                  "-Xptxas=-v", "kernel.cu", "-o", "report.cubin"], cwd=work,
                                 env=env, capture_output=True, text=True)
            print(f"# {src.name}", file=sys.stderr)
            print((rep.stdout + rep.stderr).rstrip(), file=sys.stderr)
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp_out = out.with_suffix(".cubin.tmp")
        shutil.copyfile(work / "kernel.cubin", tmp_out)
        os.replace(tmp_out, out)
    return out


def build(out_dir: Path, nvcc: str | None = None, verbose: bool = False,
          defines: tuple[str, ...] = ()) -> dict[str, str]:
    """Build every kernel (``defines``: extra ``-D`` macros, a lever's variant); return
    ``{cubin file name: sha256}``."""
    exe = find_nvcc(nvcc)
    if exe is None:
        raise FileNotFoundError("nvcc not found (PATH, /usr/local/bin, /usr/local/cuda/bin)")
    result = {}
    for src in sources():
        path = build_one(exe, src, out_dir, verbose=verbose, defines=defines)
        result[path.name] = sha256_file(path)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path, help="directory that receives <name>.cubin")
    ap.add_argument("--nvcc", default=None, help="nvcc to use (default: PATH, /usr/local/...)")
    ap.add_argument("--verbose", "-v", action="store_true",
                    help="pass -Xptxas=-v and show ptxas' register/spill report on stderr")
    ap.add_argument("--define", "-D", action="append", default=[], metavar="NAME=VALUE",
                    help="an extra -D macro (repeatable): a lever's variant build")
    args = ap.parse_args(argv)
    try:
        digests = build(args.out_dir, args.nvcc, args.verbose, tuple(args.define))
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, digest in digests.items():
        print(f"{digest}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
