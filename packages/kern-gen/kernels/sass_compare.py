#!/usr/bin/env python3
"""Do two builds of the own kernels run the same machine code?  For a source edit that must
not change behaviour (a refactor, a comment): the cubins' bytes can differ where the code
does not, because nvcc names an anonymous namespace's objects (shared arrays) after a hash
of the translation unit (``_INTERNAL_<hash>_…``).  This compares the SASS of every function
with those names normalised, so no GPU run is needed to prove such an edit harmless.

    python3 packages/kern-gen/kernels/build.py /tmp/old      # on the old tree
    python3 packages/kern-gen/kernels/build.py /tmp/new      # on the new tree
    python3 packages/kern-gen/kernels/sass_compare.py /tmp/old /tmp/new [--nvdisasm PATH]

Prints one line per cubin (``bytes same``, ``SASS same`` or ``SASS DIFFERS`` with the first
differing lines) and exits 1 if any cubin's SASS differs or is missing on one side.

Per function, for a source edit meant to change some kernels of a cubin and not others (OLD
and NEW may then be single cubins):

    python3 packages/kern-gen/kernels/sass_compare.py OLD.cubin NEW.cubin --function d128

compares each function whose name contains the text on its own, its branch labels numbered
from its first (nvdisasm numbers them across the cubin, so added code elsewhere renames
them), and exits 1 if one differs or is missing on one side.  Session 31 showed this way that
the regenerated cluster attention's d128 functions are the shipped ones and its d64 functions
the measured lever's.

nvdisasm: ``--nvdisasm``, ``$NVDISASM``, PATH, or the CUDA toolkit's; the CPU machine has
none with nvcc, but NVIDIA's wheel carries one (``pip download --no-deps
nvidia-cuda-nvdisasm``, unzip, ``nvidia/cu13/bin/nvdisasm``).  Standard library only.
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

INTERNAL = re.compile(r"_INTERNAL_[0-9a-f]+_\d+_")


def find_nvdisasm(explicit: str | None) -> str:
    for cand in (explicit, os.environ.get("NVDISASM"), shutil.which("nvdisasm"),
                 "/usr/local/cuda/bin/nvdisasm"):
        if cand and os.access(cand, os.X_OK):
            return cand
    sys.exit("sass_compare: no nvdisasm (give --nvdisasm PATH or set $NVDISASM; the module "
             "docstring says where to get one)")


def sass(nvdisasm: str, cubin: Path) -> list[str]:
    """The cubin's SASS, one instruction or label a line, internal names normalised."""
    out = subprocess.run([nvdisasm, "-c", str(cubin)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"sass_compare: nvdisasm failed on {cubin}: {out.stderr.strip()}")
    return [INTERNAL.sub("_INTERNAL_", line.rstrip()) for line in out.stdout.splitlines()]


LABEL = re.compile(r"\.L_x_\d+")
TEXT = re.compile(r"^\.text\.(\w+):")
ADDRESS = re.compile(r"/\*[0-9a-f]{4,}\*/")


def functions(lines: list[str]) -> dict[str, list[str]]:
    """{function: its SASS}, instruction addresses dropped and branch labels renumbered in
    order of first appearance within the function."""
    out: dict[str, list[str]] = {}
    cur: list[str] | None = None
    labels: dict[str, str] = {}
    for line in lines:
        if line.startswith("//----"):
            cur = None
            continue
        m = TEXT.match(line.strip())
        if m:
            cur, labels = out.setdefault(m.group(1), []), {}
            continue
        if cur is not None:
            cur.append(LABEL.sub(lambda x: labels.setdefault(x.group(0), f".L{len(labels)}"),
                                 ADDRESS.sub("", line)))
    return out


def compare_functions(tool: str, old: Path, new: Path, part: str) -> int:
    fa, fb = functions(sass(tool, old)), functions(sass(tool, new))
    names = sorted(n for n in set(fa) | set(fb) if part in n)
    if not names:
        print(f"no function of {old} or {new} has {part!r} in its name")
        return 1
    bad = 0
    for name in names:
        if name not in fa or name not in fb:
            print(f"{name}: only in {old if name in fa else new}")
            bad += 1
        elif fa[name] == fb[name]:
            print(f"{name}: SASS same ({len(fa[name])} lines)")
        else:
            bad += 1
            diff = list(difflib.unified_diff(fa[name], fb[name], n=1, lineterm=""))
            print(f"{name}: SASS DIFFERS ({len(diff)} diff lines); first:")
            print("\n".join(diff[2:20]))
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path, help="a build folder, or one cubin with --function")
    ap.add_argument("new", type=Path)
    ap.add_argument("--nvdisasm")
    ap.add_argument("--function", metavar="TEXT",
                    help="compare the functions whose names contain TEXT, one by one")
    args = ap.parse_args()
    if args.function is not None:
        for p in (args.old, args.new):
            if not p.is_file():
                sys.exit(f"sass_compare: --function compares two cubin files; {p} is not one")
        return compare_functions(find_nvdisasm(args.nvdisasm), args.old, args.new, args.function)
    tool = None                  # found when a pair of cubins first differs in bytes
    names = sorted({p.name for d in (args.old, args.new) for p in d.glob("*.cubin")})
    bad = 0
    for name in names:
        a, b = args.old / name, args.new / name
        if not (a.exists() and b.exists()):
            print(f"{name}: only in {args.old if a.exists() else args.new}")
            bad += 1
            continue
        if a.read_bytes() == b.read_bytes():
            print(f"{name}: bytes same")
            continue
        tool = tool or find_nvdisasm(args.nvdisasm)
        sa, sb = sass(tool, a), sass(tool, b)
        if sa == sb:
            print(f"{name}: bytes differ, SASS same ({len(sa)} lines)")
            continue
        bad += 1
        diff = list(difflib.unified_diff(sa, sb, str(a), str(b), n=1, lineterm=""))
        print(f"{name}: SASS DIFFERS ({len(diff)} diff lines); first:")
        print("\n".join(diff[:30]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
