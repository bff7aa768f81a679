"""Training sequences: each prompt in the target's chat format, continued greedily by the
target (HF ``generate``, batched, left-padded, ``do_sample=False``).

:class:`Sequences` (saved as ``.npz``): ``tokens`` [n, T] int32 laid out from position 0
(prompt, then continuation up to and including the first EOS; right-padded with ``pad``),
``length`` [n] (real tokens), ``prompt_len`` [n], ``eval`` [n] bool (the prompts file's split),
``source`` [n] str (the prompt's source: sharegpt, gsm8k, humaneval; "" in files written
before it existed) and ``meta`` (JSON: prompts header, generation settings and what the
budget achieved).

Anchors are drawn in the continuation only: position p with prompt_len ≤ p ≤ length − 1 − B
(the block's 7 predictions p + 1 … p + 7 all exist), as at inference, where the first anchor is
the first generated token.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .config import DSparkError
from .target import Target


@dataclass
class Sequences:
    tokens: np.ndarray       # [n, T] int32
    length: np.ndarray       # [n] int32
    prompt_len: np.ndarray   # [n] int32
    eval: np.ndarray         # [n] bool
    meta: dict[str, Any]
    source: np.ndarray | None = None   # [n] str; None: unknown (read as "" per row)

    def sources(self) -> np.ndarray:
        """[n] the rows' sources ("" where unknown)."""
        return self.source if self.source is not None else np.full(len(self.length), "")

    def save(self, path: str | Path) -> None:
        with open(path, "wb") as f:
            np.savez(f, tokens=self.tokens, length=self.length, prompt_len=self.prompt_len,
                     eval=self.eval, source=self.sources().astype(str),
                     meta=np.array(json.dumps(self.meta)))

    @staticmethod
    def load(path: str | Path) -> Sequences:
        try:
            z = np.load(path)
            return Sequences(tokens=z["tokens"], length=z["length"], prompt_len=z["prompt_len"],
                             eval=z["eval"], meta=json.loads(str(z["meta"])),
                             source=z["source"] if "source" in z.files else None)
        except (OSError, KeyError, ValueError) as e:
            raise DSparkError(f"{path}: not a sequences file ({type(e).__name__}: {e})") \
                from None

    def split(self, held_out: bool) -> Sequences:
        m = self.eval == held_out
        return Sequences(self.tokens[m], self.length[m], self.prompt_len[m], self.eval[m],
                         self.meta, self.sources()[m])


def chat_ids(tok: Any, texts: list[str]) -> list[list[int]]:
    """The token ids of each text as one user message in the tokenizer's chat format
    (generation prompt included; the template writes any BOS/system text itself)."""
    rendered = [tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False,
                                        add_generation_prompt=True) for t in texts]
    return [list(x) for x in tok(rendered, add_special_tokens=False)["input_ids"]]


def eos_ids(target: Target) -> list[int]:
    e = target.model.generation_config.eos_token_id
    e = target.tokenizer.eos_token_id if e is None else e
    return sorted({e} if isinstance(e, int) else set(e))


def continue_batch(target: Target, prompts: list[list[int]], new_tokens: int,
                   eos: list[int], pad: int, log=print) -> list[list[int]]:
    """Greedy continuations of ``prompts``: each up to and including its first EOS. A batch
    that does not fit in GPU memory runs as two halves (the same continuations up to bf16
    batch-composition effects; the log says so)."""
    try:
        return _continue(target, prompts, new_tokens, eos, pad)
    except torch.OutOfMemoryError:
        if len(prompts) == 1:
            raise
        torch.cuda.empty_cache()
        h = len(prompts) // 2
        log(f"data: a batch of {len(prompts)} ran out of GPU memory; halves of {h}")
        return (continue_batch(target, prompts[:h], new_tokens, eos, pad, log)
                + continue_batch(target, prompts[h:], new_tokens, eos, pad, log))


@torch.no_grad()
def _continue(target: Target, prompts: list[list[int]], new_tokens: int,
              eos: list[int], pad: int) -> list[list[int]]:
    dev = target.device
    w = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), w), pad, dtype=torch.long)
    am = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, w - len(p):] = torch.tensor(p)
        am[i, w - len(p):] = 1
    out = target.model.generate(input_ids=ids.to(dev), attention_mask=am.to(dev),
                                max_new_tokens=new_tokens, min_new_tokens=0, do_sample=False,
                                temperature=None, top_p=None, top_k=None, pad_token_id=pad,
                                eos_token_id=eos)
    res = []
    for row in out[:, w:].tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        res.append(row[:cut])
    return res


def generate(target: Target, header: dict[str, Any], records: list[dict[str, Any]], *,
             new_tokens: int, max_prompt_tokens: int, batch: int, seconds: float,
             seed: int, log=print) -> Sequences:
    """Held-out prompts first (all), then training prompts in seeded order until ``seconds``
    have passed; batches of similar length (sorted within windows of 8 batches)."""
    tok = target.tokenizer
    eos = eos_ids(target)
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos[0]
    ids = chat_ids(tok, [r["text"] for r in records])
    enc = [(r["split"] == "eval", p, str(r.get("source", ""))) for r, p in zip(records, ids)]
    skipped = sum(len(p) > max_prompt_tokens for _, p, _ in enc)
    enc = [e for e in enc if len(e[1]) <= max_prompt_tokens]
    held = [e for e in enc if e[0]]
    train = [e for e in enc if not e[0]]
    random.Random(seed).shuffle(train)
    order: list[tuple[bool, list[int], str]] = []
    for part in (held, train):
        for i in range(0, len(part), 8 * batch):
            order += sorted(part[i:i + 8 * batch], key=lambda e: len(e[1]))
    t0 = time.monotonic()
    rows: list[tuple[bool, list[int], list[int], str]] = []
    n_held = len(held)
    for i in range(0, len(order), batch):
        if i >= n_held and time.monotonic() - t0 > seconds:
            break
        chunk = order[i:i + batch]
        conts = continue_batch(target, [p for _, p, _ in chunk], new_tokens, eos, pad, log)
        rows += [(h, p, c, s) for (h, p, s), c in zip(chunk, conts)]
        if (i // batch) % max(1, 5120 // batch) == 0:   # about every 5k sequences
            log(f"data: {len(rows)} sequences, {time.monotonic() - t0:.0f} s")
    secs = time.monotonic() - t0
    T = max(len(p) + len(c) for _, p, c, _ in rows)
    tokens = np.full((len(rows), T), pad, dtype=np.int32)
    for i, (_, p, c, _) in enumerate(rows):
        tokens[i, :len(p) + len(c)] = p + c
    meta = {"prompts": header, "new_tokens": new_tokens, "max_prompt_tokens": max_prompt_tokens,
            "batch": batch, "seed": seed, "eos": eos, "pad": pad, "seconds": round(secs, 1),
            "prompts_skipped_too_long": skipped, "sequences": len(rows),
            "held_out": sum(h for h, _, _, _ in rows),
            "generated_tokens": sum(len(c) for _, _, c, _ in rows)}
    log(f"data: {len(rows)} sequences ({meta['held_out']} held out), "
        f"{meta['generated_tokens']} generated tokens in {secs:.1f} s")
    return Sequences(tokens=tokens,
                     length=np.array([len(p) + len(c) for _, p, c, _ in rows], dtype=np.int32),
                     prompt_len=np.array([len(p) for _, p, _, _ in rows], dtype=np.int32),
                     eval=np.array([h for h, _, _, _ in rows], dtype=bool), meta=meta,
                     source=np.array([s for _, _, _, s in rows], dtype=str))
