"""Hostile captures for the fuzz test (``test_fuzz.py``) and the fuzz run
(``bench/fuzz_mine.py``): real and synthetic captures, mutated.

Bases: a small synthetic capture with real forwards (``kern_mine_synth``: mining reaches
passes, sites, fits and pointers), the committed ``synthetic-v1`` and ``gt-h200`` fixtures,
and windows of 150 launches of the recorded Qwen3-4B and SmolLM2 captures (real records:
launch attributes, packed ``extra`` buffers, by-value structs with pointers).

A case writes one capture directory: the launches file (plain, ``.gz`` or ``.xz``) with 1-4
record mutations (a value replaced by any JSON value: boundary and 5000-digit integers,
NaN/inf, strings with lone surrogates, non-hex byte strings, nesting up to 100 000 levels; a
key deleted or added; lines duplicated, dropped, swapped) and sometimes a text mutation
(truncated anywhere, bytes inserted, blank lines, no final newline) or a damaged compressed
stream (cut short, bytes flipped); side files (``meta.json``, ``summary.json``,
``modules.jsonl``) kept, dropped or damaged; and the path handed over as the directory, the
launches file, a ``pid-*`` base directory or a path that does not exist. A case is a pure
function of a ``random.Random`` (:func:`make_case`), so the fuzz run names a failure by seed.

:func:`check` is the property: ``read_capture`` raises nothing but ``CaptureFormatError``,
``mine`` nothing but ``MineError``; a mined result renders and round-trips through its JSON;
the CLI exits 0 exactly when ``mine`` succeeds and 2 when it refuses, with one error line and
no traceback.
"""

from __future__ import annotations

import atexit
import copy
import gzip
import json
import lzma
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from kern_mine import MineError, decode_json, encode_json, mine, render_report
from kern_mine.capture_format import CaptureFormatError, read_capture
from kern_mine.cli import app
from kern_mine_synth import build_capture

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "captures"
_runner = CliRunner()
_WORK = Path(tempfile.mkdtemp(prefix="kern-mine-fuzz-"))
atexit.register(shutil.rmtree, _WORK, ignore_errors=True)


def _lines(path: Path) -> list[dict]:
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rb") as f:
        return [json.loads(line) for line in f if line.strip()]


def _load_bases() -> list[tuple[str, Path, list[dict]]]:
    """(label, directory holding meta/summary/modules, launch records)."""
    build_capture(_WORK / "synth", layers=1, requests=((7, 1), (34, 1), (85, 1)), autotune=10)
    bases = [("synth", _WORK / "synth", _lines(_WORK / "synth" / "launches.jsonl"))]
    for name in ("synthetic-v1", "gt-h200"):
        bases.append((name, FIXTURES / name, _lines(FIXTURES / name / "launches.jsonl")))
    for name in ("qwen3-4b-random", "smollm2-135m"):
        records = _lines(FIXTURES / name / "launches.jsonl.xz")
        for k, start in enumerate(range(0, len(records), len(records) // 4)):
            bases.append((f"{name}[{k}]", FIXTURES / name, records[start:start + 150]))
    return bases


BASES = _load_bases()
_MARK = "\x00raw:{}\x00"
BOUNDARY_INTS = [0, -1, 1, 2, 3, 4, 8, 255, 4096, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1,
                 2**64, -(2**63), -(2**63) - 1, 10**30]
_CHARS = [(0x20, 0x7E)] * 4 + [(0, 0x1F), (0xD800, 0xDFFF), (0x80, 0xFFFF), (0x10000, 0x10FFFF)]


def rand_text(rnd: random.Random) -> str:
    return "".join(chr(rnd.randint(*rnd.choice(_CHARS))) for _ in range(rnd.randint(0, 6)))


def rand_value(rnd: random.Random, depth: int = 0) -> Any:
    r = rnd.randrange(14)
    if r == 0:  # raw literals json.dumps cannot write
        depth = rnd.choice([100, 5000, 100_000])
        return _MARK.format(rnd.choice(["9" * rnd.randint(20, 5000), "1e400", "NaN", "-Infinity",
                                        "-0", "[" * depth + "]" * depth]))
    if r < 4:
        return rnd.choice(BOUNDARY_INTS)
    if r < 5:
        return rnd.randint(-10, 10**6)
    if r < 6:
        return rnd.choice([0.5, -1.5, 1e300, float("nan"), float("inf")])
    if r < 8:  # byte strings: hex, odd, uppercase, junk
        return rnd.choice(["", "00", "0", "zz", "ABCD", "00 11", "ff" * rnd.randint(1, 40)])
    if r < 9:
        return rand_text(rnd)
    if r < 10:
        return rnd.choice([None, True, False, "cuLaunchKernel", "function", "extra", "params"])
    if depth < 2 and r < 12:
        return [rand_value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]
    if depth < 2:
        keys = ["at", "value", "range_start", "range_size", "offset", "size", "bytes", "id", "raw",
                "x"]
        return {rnd.choice(keys): rand_value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))}
    return rnd.choice(BOUNDARY_INTS)


def _slots(doc: Any, out: list) -> list:
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        out.append((doc, k))
        _slots(v, out)
    return out


def _mutate_records(rnd: random.Random, records: list[dict]) -> list[dict]:
    records = [copy.deepcopy(r) for r in records] if records else []
    for _ in range(rnd.choice([0, 1, 1, 1, 2, 3, 4])):
        if not records:
            break
        action = rnd.choice(["value", "value", "value", "delete", "insert", "line"])
        rec = rnd.choice(records)
        slots = _slots(rec, [])
        if action == "line":
            i, j = rnd.randrange(len(records)), rnd.randrange(len(records))
            how = rnd.choice(["dup", "drop", "swap"])
            if how == "dup":
                records.insert(i, copy.deepcopy(records[j]))
            elif how == "drop":
                del records[i]
            else:
                records[i], records[j] = records[j], records[i]
        elif slots:
            c, k = rnd.choice(slots)
            if action == "value":
                c[k] = rand_value(rnd)
            elif action == "delete":
                del c[k]
            elif isinstance(c, dict):
                c[rnd.choice(["x", "seq", "grid", "params", "ptrs", "future"])] = rand_value(rnd)
            else:
                c.insert(k, rand_value(rnd))
    return records


def _serialise(rnd: random.Random, records: list[dict]) -> bytes:
    text = "".join(json.dumps(r, ensure_ascii=rnd.random() < 0.7) + "\n" for r in records)
    while (a := text.find('"\\u0000raw:')) >= 0:  # each marker: one JSON string token
        b = text.index('\\u0000"', a + 1) + len('\\u0000"')
        text = text[:a] + json.loads(text[a:b])[len("\0raw:"):-1] + text[b:]
    data = text.encode("utf-8", "surrogatepass")
    r = rnd.random()
    if r < 0.08:
        data = data[:rnd.randint(0, len(data))]  # cut anywhere: a partial last line, mostly
    elif r < 0.12:
        at = rnd.randint(0, len(data))
        data = data[:at] + rnd.randbytes(rnd.randint(1, 4)) + data[at:]
    elif r < 0.15:
        data = data.rstrip(b"\n")
    elif r < 0.18:
        data = data.replace(b"\n", b"\n\n", rnd.randint(1, 3))
    return data


def make_case(rnd: random.Random, root: Path) -> Path:
    """Writes one hostile capture under ``root`` (emptied first); returns the path to mine."""
    shutil.rmtree(root, ignore_errors=True)
    cap = root / "pid-7"
    cap.mkdir(parents=True)
    _, src, records = rnd.choice(BASES)
    data = _serialise(rnd, _mutate_records(rnd, records))
    suffix = rnd.choice(["", "", "", ".gz", ".xz"])
    if suffix == ".gz":
        data = gzip.compress(data)
    elif suffix == ".xz":
        data = lzma.compress(data)
    if suffix and rnd.random() < 0.2:
        if rnd.random() < 0.5:
            data = data[:rnd.randint(0, len(data))]
        elif data:
            b = bytearray(data)
            for _ in range(rnd.randint(1, 4)):
                b[rnd.randrange(len(b))] ^= 1 << rnd.randrange(8)
            data = bytes(b)
    launches = cap / f"launches.jsonl{suffix}"
    launches.write_bytes(data)
    for side in ("meta.json", "summary.json", "modules.jsonl"):
        if not (src / side).is_file() or rnd.random() < 0.1:
            continue
        raw = (src / side).read_bytes()
        r = rnd.random()
        if r < 0.03:
            raw = raw[:rnd.randint(0, len(raw))]
        elif r < 0.08 and side.endswith(".json"):
            doc = json.loads(raw)
            _mutate_records(rnd, [doc])
            doc[rnd.choice(list(doc) or ["version"])] = rand_value(rnd)
            raw = _serialise(rnd, [doc])
        (cap / side).write_bytes(raw)
    where = rnd.random()
    if where < 0.45:
        return cap
    if where < 0.8:
        return launches
    if where < 0.97:
        return root
    return root / "missing"


def check(path: Path) -> str:
    """The fuzz property on one capture path (see the module docstring); returns the outcome
    (``"mined"`` or ``"refused"``). Raises on any violation."""
    try:
        read_capture(path)
    except CaptureFormatError:
        pass
    try:
        mined = mine(path)
    except MineError:
        outcome = "refused"
    else:
        outcome = "mined"
        render_report(mined)
        assert decode_json(encode_json(mined)) == mined
    res = _runner.invoke(app, [str(path), "-q"])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    assert "Traceback" not in res.output
    assert res.exit_code == (0 if outcome == "mined" else 2), (res.exit_code, res.output[-2000:])
    if outcome == "refused":
        assert len(res.output.strip().splitlines()) == 1 and "kern-mine: error: " in res.output
    return outcome
