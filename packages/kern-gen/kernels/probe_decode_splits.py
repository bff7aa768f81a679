"""Probe manifests for the decode attention's split count (issue 16): a copy of a kern-gen
manifest folder whose ``decode`` attention uses another ``s_min`` (the fewest key splits a
row uses, :func:`kern_gen.llama.own.decode_splits`) and optionally another grid of S splits.

These manifests are measurement inputs only, never shipped: a setting that wins goes into
the generator (``own.decode_splits``) and the examples are regenerated.  Works on both
implementations (ABI.md 3a: the two-launch partial + reduce, whose reduce takes S as an
argument; 3a′: the one-launch kernel); S is the grid's y extent in both, and the scratch
keeps the generator's (larger) size.

    python3 probe_decode_splits.py SRC_DIR OUT_DIR S_MIN [S]
"""
import json
import shutil
import sys
from pathlib import Path

PARTIAL, REDUCE, ONE = ("kern_attn_decode_partial_", "kern_attn_decode_reduce_",
                        "kern_attn_decode_bf16_")


def patch(doc: dict, s_min: int, grid_s: int | None) -> list[str]:
    kern = doc["kernels"]["decode.attention"]["impl"]
    done = []
    for st in kern["steps"]:
        sym, args = st["symbol"], st["args"]
        if sym.startswith(PARTIAL) or sym.startswith(ONE):
            assert "i32" in args[-2], args
            args[-2] = {"i32": s_min}
            if grid_s:
                assert grid_s <= st["grid"][1]
                st["grid"][1] = grid_s
        elif sym.startswith(REDUCE):
            assert "i32" in args[-1] and "i32" in args[-2], args
            args[-1] = {"i32": s_min}
            if grid_s:
                args[-2] = {"i32": grid_s}
        else:
            raise SystemExit(f"unexpected step {sym}")
        done.append(f"{sym} grid {st['grid']} args[-2:] {args[-2:]}")
    return done


def main() -> None:
    src, out, s_min = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    grid_s = int(sys.argv[4]) if len(sys.argv) > 4 else None
    doc = json.loads((src / "manifest.json").read_text())
    lines = patch(doc, s_min, grid_s)
    doc["meta"]["model"] += f" (probe: decode s_min {s_min}" + (f", S {grid_s})" if grid_s else ")")
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src / "kernels", out / "kernels")
    if (src / "export-plan.json").is_file():   # the weights' export plan (merged tensors)
        shutil.copyfile(src / "export-plan.json", out / "export-plan.json")
    (out / "manifest.json").write_text(json.dumps(doc, indent=1))
    print(out, *lines, sep="\n  ")


if __name__ == "__main__":
    main()
