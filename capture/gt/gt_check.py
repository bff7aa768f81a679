#!/usr/bin/env python3
"""Compare a capture of the ground-truth program (gt.cu) with what it expected.

usage: gt_check.py CAPTURE_BASE EXPECTED.jsonl MOD_A.cubin MOD_B.cubin [RUNTIME.cubin ...]

CAPTURE_BASE is the KERN_CAPTURE_DIR the program ran with (the single
pid-* directory below it is used) or a pid-* directory itself.  RUNTIME cubins
are the sm_90 cubins embedded in the gt executable (`cuobjdump -xelf all gt`);
a library kernel's module must be byte-identical to one of them ("exact"), or
else at least a dumped module holding its symbol ("symbol", reported, still
a failure of the exactness check).

Prints one PASS/FAIL row per expected launch plus whole-capture checks, and
exits 0 only if every row passes.  Standard library only (runs on the GPU
machine, which has no msgspec).
"""
from __future__ import annotations

import hashlib
import json
import sys
from collections import defaultdict, deque
from pathlib import Path

LAUNCH_APIS = {
    "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
    "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz",
}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def find_capture(base: Path) -> Path:
    if (base / "launches.jsonl").exists():
        return base
    dirs = sorted(p for p in base.glob("pid-*") if (p / "launches.jsonl").exists())
    if len(dirs) != 1:
        sys.exit(f"expected exactly one pid-* capture under {base}, found {len(dirs)}")
    return dirs[0]


def read_jsonl(path: Path) -> list[dict]:
    out = []
    with path.open() as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


def check_launch(exp: dict, got: dict | None, mods: dict[str, str], rt_shas: set[str], capdir: Path) -> list[str]:
    """Returns the list of failures (empty = PASS); informational notes start with '~'."""
    if got is None:
        return ["no captured launch"]
    bad: list[str] = []
    if exp["api"] is not None:
        if got["api"] != exp["api"]:
            bad.append(f"api {got['api']} != {exp['api']}")
    elif got["api"] not in LAUNCH_APIS:
        bad.append(f"api {got['api']}")
    m = got.get("module")
    if m is None:
        bad.append(f"module null (how={got.get('module_how')})")
    elif exp["module"] == "rt":
        if m not in rt_shas:
            cub = capdir / "modules" / f"{m}.cubin"
            has = cub.exists() and (b"\0" + exp["name"].encode() + b"\0") in cub.read_bytes()
            bad.append("module not byte-identical to gt's cubin" + (" (holds the symbol)" if has else ""))
    elif m != mods[exp["module"]]:
        bad.append(f"module {m[:12]} != {exp['module']} {mods[exp['module']][:12]}")
    for k in ("grid", "block", "smem", "capturing"):
        if got.get(k) != exp[k]:
            bad.append(f"{k} {got.get(k)} != {exp[k]}")
    fa = got.get("fattr") or {}
    if fa.get("regs") != exp["regs"]:
        bad.append(f"regs {fa.get('regs')} != {exp['regs']}")
    gattrs = {a["id"]: a for a in got.get("attrs", [])}
    for a in exp["attrs"]:
        ga = gattrs.get(a["id"])
        if ga is None or ga.get("value") != a["value"]:
            bad.append(f"attr {a['id']} {ga and ga.get('value')} != {a['value']}")
    gp = got.get("params")
    if gp is None:
        bad.append("params null")
        return bad
    if len(gp) != len(exp["params"]):
        bad.append(f"{len(gp)} params != {len(exp['params'])}")
        return bad
    for i, (g, e) in enumerate(zip(gp, exp["params"])):
        for k in ("offset", "size", "bytes"):
            if g.get(k) != e[k]:
                bad.append(f"param {i} {k} {g.get(k)} != {e[k]}")
    want = {(p["param"], p["at"]): p for p in exp["ptrs"]}
    seen = {(i, q["at"]): q for i, g in enumerate(gp) for q in g.get("ptrs", [])}
    for key, e in want.items():
        q = seen.get(key)
        if q is None:
            bad.append(f"param {key[0]}+{key[1]}: pointer not annotated")
            continue
        for k in ("value", "range_start", "range_size"):
            if q.get(k) != e[k]:
                bad.append(f"param {key[0]}+{key[1]} {k} {q.get(k)} != {e[k]}")
        if q.get("offset") != e["value"] - e["range_start"]:
            bad.append(f"param {key[0]}+{key[1]} offset {q.get('offset')}")
    for key in seen.keys() - want.keys():
        bad.append(f"param {key[0]}+{key[1]}: unexpected pointer annotation")
    return bad


def main(argv: list[str]) -> int:
    if len(argv) < 5:
        print(__doc__)
        return 2
    capdir = find_capture(Path(argv[1]))
    expected = read_jsonl(Path(argv[2]))
    mods = {"A": sha(Path(argv[3])), "B": sha(Path(argv[4]))}
    rt_shas = {sha(Path(p)) for p in argv[5:]}
    launches = read_jsonl(capdir / "launches.jsonl")
    modules = read_jsonl(capdir / "modules.jsonl")
    names = {e["name"] for e in expected}
    queues: dict[str, deque] = defaultdict(deque)
    for rec in launches:
        if rec.get("name") in names:
            queues[rec["name"]].append(rec)

    rows: list[tuple[str, str, str]] = []
    for e in expected:
        q = queues.get(e["name"])
        got = q.popleft() if q else None
        bad = check_launch(e, got, mods, rt_shas, capdir)
        info = ""
        if got is not None:
            info = f"{got['api']} handle={got.get('handle')} module_how={got.get('module_how')}"
        rows.append((e["tag"], "FAIL" if bad else "PASS", "; ".join(bad) or info))
    extra = sum(len(q) for q in queues.values())
    rows.append(("no_extra_records", "PASS" if extra == 0 else "FAIL",
                 f"{extra} launches beyond the expected ones (graph replay must add none)"))
    shas = {m["sha256"] for m in modules}
    ok_mods = mods["A"] in shas and mods["B"] in shas
    rows.append(("module_index", "PASS" if ok_mods else "FAIL",
                 f"{len(modules)} modules indexed; A and B present: {ok_mods}"))
    dumped = all((capdir / "modules" / f"{s}.cubin").exists() for s in shas if s)
    rows.append(("module_dumps", "PASS" if dumped else "FAIL", "every indexed module has its cubin"))
    closed = (capdir / "summary.json").exists()
    rows.append(("clean_close", "PASS" if closed else "FAIL", "summary.json written at exit"))

    w = max(len(r[0]) for r in rows)
    print(f"{'check':<{w}}  result  detail")
    for tag, res, detail in rows:
        print(f"{tag:<{w}}  {res:<6}  {detail}")
    nfail = sum(r[1] == "FAIL" for r in rows)
    print(f"GT {'PASS' if nfail == 0 else 'FAIL'}: {len(rows) - nfail}/{len(rows)} checks passed")
    return 0 if nfail == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
