#!/usr/bin/env python3
"""Trim a capture directory into a small fixture, and summarise what a capture holds.

    trim.py CAPTURE OUTDIR [--sidecar provider.json] [--keep-before N] [--compress xz|gz|none]
    trim.py --stats CAPTURE            # print the summary of a capture only
    trim.py --fixture TRIMMED          # flat-ABI cubins only, xz-compressed, for the repository

Real captures are dominated by launches outside the forward passes that matter (Inductor
autotuning and compilation; an engine's warm-up).  With a provider sidecar
(capture/models/hf_capture.py) the trim keeps every launch inside a request's time window
(first prefill start .. last decode end, CLOCK_MONOTONIC like the capture) plus the N
launches just before each window (default 200), so the fixture still holds some of the
"dummy" launches a miner must learn to cut.  Without a sidecar it keeps everything (or the
last --last N launches).  Launch lines are copied verbatim, so the output is the same
format version.  Module cubins are kept only for kernels launched with a flat ABI (every
parameter a scalar or pointer of at most 8 bytes: Triton and similar kernels a generator can
replay from the cubin), under per-file and total byte caps; every module stays in the index.
A `trim.json` records the rule and the counts; the sidecar is copied as
`provider-sidecar.json` (provider ground truth: never input to the miner).

Standard library only: it runs on the GPU machine, which has no msgspec.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import gzip
import json
import lzma
import shutil
import sys
from pathlib import Path

LAUNCH_NAMES = ("launches.jsonl", "launches.jsonl.xz", "launches.jsonl.gz")


def open_text(path: Path):
    if path.suffix == ".xz":
        return lzma.open(path, "rt", encoding="utf-8")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def resolve_capture(path: Path, pid: int | None = None) -> Path:
    """A capture directory; from a base directory pick pid-<pid>, else the pid-* with the
    largest launches file (compile workers may have their own, nearly empty ones)."""
    if any((path / n).exists() for n in LAUNCH_NAMES):
        return path
    subs = [p for p in path.glob("pid-*") if any((p / n).exists() for n in LAUNCH_NAMES)]
    if pid is not None and (path / f"pid-{pid}").is_dir():
        return path / f"pid-{pid}"
    if not subs:
        sys.exit(f"trim: no capture under {path}")
    return max(subs, key=lambda p: sum((p / n).stat().st_size for n in LAUNCH_NAMES if (p / n).exists()))


def launches_file(d: Path) -> Path:
    for n in LAUNCH_NAMES:
        if (d / n).exists():
            return d / n
    raise FileNotFoundError(d)


class Stats:
    """Counts that describe a capture (or a trimmed part of it)."""

    def __init__(self) -> None:
        self.n = 0
        self.api = collections.Counter()
        self.handle = collections.Counter()
        self.abi = collections.Counter()
        self.capturing = 0
        self.failed = 0
        self.kernels: dict[tuple[str | None, str | None], collections.Counter] = {}
        self.no_module = 0
        self.ptr_words = 0
        self.t_first = None
        self.t_last = None

    def add(self, r: dict) -> None:
        self.n += 1
        self.api[r.get("api")] += 1
        self.handle[r.get("handle")] += 1
        self.abi[abi_class(r)] += 1
        self.capturing += r.get("capturing") is True
        self.failed += r.get("result", 0) != 0
        self.no_module += r.get("module") is None
        for p in r.get("params") or ():
            self.ptr_words += len(p.get("ptrs", ()))
        key = (r.get("name"), r.get("module"))
        self.kernels.setdefault(key, collections.Counter())[abi_class(r)] += 1
        t = r.get("t_ns")
        if t is not None:
            self.t_first = t if self.t_first is None else min(self.t_first, t)
            self.t_last = t if self.t_last is None else max(self.t_last, t)

    def as_dict(self) -> dict:
        by_class = collections.Counter()
        for c in self.kernels.values():
            by_class[c.most_common(1)[0][0]] += 1
        names = collections.Counter(k[0] for k in self.kernels)
        return {
            "launches": self.n,
            "by_api": dict(self.api),
            "by_handle": dict(self.handle),
            "by_abi": dict(self.abi),
            "distinct_kernels": len(self.kernels),
            "distinct_kernels_by_abi": dict(by_class),
            "names_in_several_modules": sum(1 for v in names.values() if v > 1),
            "launches_without_module": self.no_module,
            "launches_in_stream_capture": self.capturing,
            "launches_failed": self.failed,
            "pointer_words": self.ptr_words,
            "span_s": (self.t_last - self.t_first) / 1e9 if self.n else 0.0,
        }


def abi_class(r: dict) -> str:
    """flat: separate scalars and pointers only; struct: some parameter larger than 8 bytes
    (a by-value struct); packed: arguments via `extra` with no readable layout; unknown:
    no layout."""
    params = r.get("params")
    if params is None:
        return "packed" if r.get("args") == "extra" else "unknown"
    if any(p["size"] > 8 for p in params):
        return "struct"
    return "flat"


def windows_from_sidecar(sidecar: dict) -> list[tuple[int, int]]:
    out = []
    for req in sidecar.get("requests", []):
        fw = req.get("forwards", [])
        if fw:
            out.append((fw[0]["t0_ns"], fw[-1]["t1_ns"]))
    return sorted(out)


def stats_only(capture: Path) -> dict:
    d = resolve_capture(capture)
    st = Stats()
    with open_text(launches_file(d)) as f:
        for line in f:
            if line.strip():
                try:
                    st.add(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a partial last line of an interrupted capture
    return {"capture": str(d), **st.as_dict()}


def trim(args: argparse.Namespace) -> dict:
    sidecar = json.loads(Path(args.sidecar).read_text()) if args.sidecar else None
    src = resolve_capture(Path(args.capture), sidecar.get("pid") if sidecar else None)
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    windows = windows_from_sidecar(sidecar) if sidecar else []
    starts = [w[0] for w in windows]

    # Pass 1: index of the first launch at/after each window start (for keep-before).
    lines_t: list[int] = []
    with open_text(launches_file(src)) as f:
        for line in f:
            try:
                lines_t.append(json.loads(line)["t_ns"])
            except (json.JSONDecodeError, KeyError):
                lines_t.append(-1)
    keep_before: set[int] = set()
    if windows:
        for s in starts:
            first = next((i for i, t in enumerate(lines_t) if t >= s), len(lines_t))
            keep_before.update(range(max(0, first - args.keep_before), first))
    last_from = len(lines_t) - args.last if args.last else 0

    def keep(i: int, t: int) -> bool:
        if windows:
            j = bisect.bisect_right(starts, t) - 1
            return (j >= 0 and t <= windows[j][1]) or i in keep_before
        return i >= last_from

    full, kept = Stats(), Stats()
    want_modules: collections.Counter = collections.Counter()
    opener = {"xz": lambda p: lzma.open(p, "wt", encoding="utf-8", preset=6),
              "gz": lambda p: gzip.open(p, "wt", encoding="utf-8", compresslevel=9),
              "none": lambda p: p.open("w", encoding="utf-8")}[args.compress]
    name = "launches.jsonl" + {"xz": ".xz", "gz": ".gz", "none": ""}[args.compress]
    with open_text(launches_file(src)) as f, opener(out / name) as w:
        for i, line in enumerate(f):
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # interrupted last line
            full.add(r)
            if keep(i, r.get("t_ns", -1)):
                kept.add(r)
                w.write(line if line.endswith("\n") else line + "\n")
                if r.get("module") and abi_class(r) == "flat":
                    want_modules[r["module"]] += 1

    for n in ("meta.json", "summary.json", "modules.jsonl"):
        if (src / n).exists():
            shutil.copyfile(src / n, out / n)
    kept_mods, skipped_mods, total = [], [], 0
    (out / "modules").mkdir(exist_ok=True)
    for sha, _ in want_modules.most_common():
        p = src / "modules" / f"{sha}.cubin"
        if not p.exists():
            continue
        size = p.stat().st_size
        if size > args.max_module_bytes or total + size > args.module_budget:
            skipped_mods.append({"sha256": sha, "size": size})
            continue
        shutil.copyfile(p, out / "modules" / p.name)
        kept_mods.append(sha)
        total += size
    if sidecar:
        (out / "provider-sidecar.json").write_text(json.dumps(sidecar, indent=1))
    info = {
        "source": str(src),
        "rule": ("launches inside request windows from the provider sidecar plus the "
                 f"{args.keep_before} launches before each window") if windows else
                (f"last {args.last} launches" if args.last else "all launches"),
        "windows_ns": windows,
        "full": full.as_dict(),
        "kept": kept.as_dict(),
        "modules_kept": kept_mods,
        "modules_skipped_by_size": skipped_mods,
        "module_bytes_kept": total,
    }
    (out / "trim.json").write_text(json.dumps(info, indent=1))
    return info


def finalize_fixture(d: Path) -> dict:
    """Prepares a trimmed capture for the repository: drops module files that no flat-ABI
    launch of the directory references and xz-compresses the rest (`<sha>.cubin.xz`)."""
    want = set()
    with open_text(launches_file(d)) as f:
        for line in f:
            r = json.loads(line)
            if r.get("module") and abi_class(r) == "flat":
                want.add(r["module"])
    kept = dropped = 0
    for p in sorted((d / "modules").glob("*.cubin*")):
        sha = p.name.split(".")[0]
        if sha not in want:
            p.unlink()
            dropped += 1
            continue
        if p.suffix == ".cubin":
            p.with_name(p.name + ".xz").write_bytes(lzma.compress(p.read_bytes(), preset=9))
            p.unlink()
        kept += 1
    return {"modules_kept": kept, "modules_dropped": dropped}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("capture")
    ap.add_argument("outdir", nargs="?")
    ap.add_argument("--stats", action="store_true", help="print the summary of CAPTURE only")
    ap.add_argument("--fixture", action="store_true",
                    help="finalize the trimmed capture CAPTURE in place for the repository (flat-ABI "
                         "cubins only, xz-compressed)")
    ap.add_argument("--sidecar")
    ap.add_argument("--keep-before", type=int, default=200)
    ap.add_argument("--last", type=int, default=0, help="without a sidecar: keep only the last N launches")
    ap.add_argument("--compress", default="xz", choices=["xz", "gz", "none"])
    ap.add_argument("--max-module-bytes", type=int, default=4 << 20)
    ap.add_argument("--module-budget", type=int, default=24 << 20)
    args = ap.parse_args()
    if args.fixture:
        print(json.dumps(finalize_fixture(Path(args.capture))))
        return 0
    if args.stats:
        print(json.dumps(stats_only(Path(args.capture)), indent=1))
        return 0
    if not args.outdir:
        ap.error("OUTDIR is required unless --stats")
    info = trim(args)
    print(json.dumps({"full": info["full"], "kept": info["kept"], "modules_kept": len(info["modules_kept"])}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
