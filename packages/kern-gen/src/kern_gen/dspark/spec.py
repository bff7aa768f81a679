"""The draft's structure, read from the example's ``dspark.json`` (docs/dspark.md "Files").

The trainer (``kern-train``) writes the file; the generator reads only the fields that shape
the manifest: the draft's layer count, the block (rows of ``draft``, Markov steps), the tap
layers, the Markov rank; ``mask_token_id`` is the caller's (it writes the block's inputs) but
is checked here against the vocabulary.  One line names the file and key on bad input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..llama.config import ModelConfig
from ..llama.errors import WiringError

FORMAT, VERSION = "kern-dspark", 1
TAPS = 5
"""Tap layers of a DSpark draft (DESIGN.md §7: five taps, one fc slice each)."""
MAX_BLOCK = 15
"""``verify`` checks ``[anchor, d_0 … d_(B−1)]``: at most 16 rows by the caller contract."""


@dataclass(frozen=True)
class DraftSpec:
    family: str             # the target's model_type: llama | qwen3
    target_layers: int
    layers: int             # draft layers, each of the target's layer geometry
    block: int              # rows of `draft` = tokens it proposes
    tap_layers: tuple[int, ...]   # hidden state after these target layers (HF hidden_states[i + 1])
    markov_rank: int
    mask_token_id: int
    path: str = "dspark.json"


def load(path: Path) -> DraftSpec:
    where = str(path)
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise WiringError(f"{where}: no such file (the draft's dspark.json; `kern-train` "
                          f"writes it)") from None
    except (OSError, ValueError) as exc:
        raise WiringError(f"{where}: not readable JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise WiringError(f"{where}: expected a JSON object")
    return from_obj(doc, where)


def from_obj(doc: dict[str, Any], where: str) -> DraftSpec:
    def need(key: str, kind: type) -> Any:
        v = doc.get(key)
        if v is None:
            raise WiringError(f"{where}: key `{key}` is missing")
        if kind is int and (isinstance(v, bool) or not isinstance(v, int)):
            raise WiringError(f"{where}: `{key}` must be an integer, got {v!r}")
        if kind is not int and not isinstance(v, kind):
            raise WiringError(f"{where}: `{key}` must be a {kind.__name__}, got {v!r}")
        return v
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise WiringError(f"{where}: `format`/`version` are {doc.get('format')!r}/"
                          f"{doc.get('version')!r}; expected {FORMAT!r}/{VERSION}")
    taps = need("tap_layers", list)
    if len(taps) != TAPS or any(isinstance(t, bool) or not isinstance(t, int) for t in taps):
        raise WiringError(f"{where}: `tap_layers` must be {TAPS} integers, got {taps!r}")
    return DraftSpec(need("family", str), need("target_layers", int), need("layers", int),
                     need("block", int), tuple(taps), need("markov_rank", int),
                     need("mask_token_id", int), where)


def check(spec: DraftSpec, cfg: ModelConfig) -> None:
    """The draft fits the target being generated for (every problem in one message)."""
    w, bad = spec.path, []
    if spec.family != cfg.model_type:
        bad.append(f"`family` {spec.family!r} but the target is {cfg.model_type!r}")
    if spec.target_layers != cfg.layers:
        bad.append(f"`target_layers` {spec.target_layers} but the target has {cfg.layers}")
    if not 1 <= spec.layers < cfg.layers:
        bad.append(f"`layers` {spec.layers} outside 1 … {cfg.layers - 1} (the draft's layers "
                   f"are the target's first ones, and layer n's input norm is its final norm)")
    if not 2 <= spec.block <= MAX_BLOCK:
        bad.append(f"`block` {spec.block} outside 2 … {MAX_BLOCK}")
    t = list(spec.tap_layers)
    if t != sorted(set(t)) or t[0] < 0 or t[-1] > cfg.layers - 2:
        bad.append(f"`tap_layers` {t} must increase strictly within 0 … {cfg.layers - 2} (the "
                   f"state after layer i is read at layer i + 1's input norm)")
    if spec.markov_rank < 8 or spec.markov_rank % 8:
        bad.append(f"`markov_rank` {spec.markov_rank} must be a positive multiple of 8 (the "
                   f"gather's 16-byte rows)")
    if not 0 <= spec.mask_token_id < cfg.vocab:
        bad.append(f"`mask_token_id` {spec.mask_token_id} outside the vocabulary "
                   f"(0 … {cfg.vocab - 1})")
    if bad:
        raise WiringError(f"{w}: " + "; ".join(bad))
