"""mine() on the real captures in tests/fixtures/captures/<name>/ that carry a provider sidecar
(capture/models/hf_capture.py --sidecar).  The sidecar is read only here, to CHECK the miner:
forwards and token counts, weights classified stable, flat grids fitted or honestly
underdetermined.  Skipped while no such capture is committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kern_mine import mine

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "captures"


def _sidecar(d: Path) -> dict | None:
    for p in sorted(d.glob("*.json")):
        if p.name in ("meta.json", "summary.json", "trim.json") or p.stat().st_size > 64 << 20:
            continue
        try:
            doc = json.loads(p.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(doc, dict) and doc.get("format") == "kern-provider-sidecar":
            return doc
    return None


CAPTURES = sorted(d for d in FIXTURES.glob("*") if d.is_dir() and _sidecar(d) is not None)


@pytest.fixture(scope="module", params=CAPTURES, ids=[d.name for d in CAPTURES])
def mined(request):
    return request.param, mine(request.param), _sidecar(request.param)


def test_forwards_and_tokens_match_sidecar(mined):
    _, m, side = mined
    windows = [(f["t0_ns"], f["t1_ns"], f["tokens"]) for r in side["requests"] for f in r["forwards"]]
    grouped = [p for p in m.passes if p.group is not None]
    matched = wrong = 0
    for t0, t1, tokens in windows:
        best, overlap = None, 0
        for p in grouped:
            ov = min(t1, p.t1_ns) - max(t0, p.t0_ns)
            if ov > overlap:
                best, overlap = p, ov
        if best is None:
            continue
        if best.tokens is not None:
            wrong += best.tokens != tokens
        matched += 1
    assert wrong == 0
    # first forwards of each compiled graph carry compilation and autotuning: irregular
    assert matched >= 0.75 * len(windows), f"{matched} of {len(windows)} sidecar forwards mined"


def test_weights_are_stable(mined):
    _, m, side = mined
    spans = sorted((w["data_ptr"], w["data_ptr"] + w["bytes"]) for w in side["weights"] if w["bytes"])
    bad = []
    for g in m.groups:
        for s in g.sites:
            # Sites whose pointers a runtime binds: flat parameters and the packed `extra` structs
            # of library calls.  Not by-value aggregates: the capture annotates every word of a
            # struct whose value lies in an allocation (FORMAT.md: "a device address", not "a
            # pointer parameter"), and the caching allocator carves weights and temporaries out
            # of the same 2 MiB segments, so a struct word holding a temporary's segment base
            # equals a weight's address in one forward (smollm2: ATen's direct_copy
            # TensorIterator struct, word +328 == q_proj.weight in the 175-token forward, another
            # segment's base in the 600-token one).  Such a word is correctly `changing`; it
            # is not a weight reference, and aggregate sites are never rebound (DESIGN §4).
            if s.replay == "aggregate":
                continue
            for p in s.pointers:
                if p.range_start is None:
                    continue
                v = p.range_start + p.offset
                if any(a <= v < b for a, b in spans) and p.klass != "stable":
                    bad.append((s.kernel, p.param, p.klass))
    assert not bad


def test_flat_grids_fit_or_are_underdetermined(mined):
    _, m, _ = mined
    bad = [(g.index, s.kernel, f.what, f.reason) for g in m.groups if g.reference.site is not None
           for s in g.sites if s.replay == "flat" for f in s.fits
           if f.what.startswith("grid.") and f.verdict == "unfittable"]
    assert not bad
