"""The trainer's steps end to end, as the CLI and the device script call them: build a draft
for a target, fit it, measure it on the held-out split, export it with its provenance."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import torch

from .config import DraftConfig, DSparkError, tap_layers
from .data import Sequences
from .evaluate import evaluate
from .export import MAX_BYTES, draft_arrays, export, load_arrays
from .model import Draft
from .target import Target
from .train import FitConfig, fit, settings


def mask_token(target: Target, given: int | None) -> int:
    """``--mask-token-id``, else the tokenizer's mask or unknown token (SmolLM2: 0,
    ``<|endoftext|>``, which an instruct continuation never contains)."""
    tok = target.tokenizer
    m = given if given is not None else (tok.mask_token_id if tok.mask_token_id is not None
                                         else tok.unk_token_id)
    if m is None or not 0 <= m < target.geometry.vocab:
        raise DSparkError(f"--mask-token-id: expected a token id below {target.geometry.vocab}, "
                          f"got {m!r}")
    return int(m)


def new_draft(target: Target, *, layers: int, markov_rank: int, mask_token_id: int | None,
              seed: int, name: str | None = None) -> Draft:
    g = target.geometry
    if not 1 <= layers <= 5:
        raise DSparkError(f"--layers: expected 1..5, got {layers}")
    if markov_rank < 1:
        raise DSparkError(f"--markov-rank: expected ≥ 1, got {markov_rank}")
    cfg = DraftConfig(target=name or target.name, family=g.family, target_layers=g.layers,
                      layers=layers, tap_layers=tap_layers(g.layers), markov_rank=markov_rank,
                      mask_token_id=mask_token(target, mask_token_id), seed=seed)
    torch.manual_seed(seed)
    emb, head = target.embed_and_head()
    return Draft(g, cfg, emb, head).to(target.device)


def load_draft(target: Target, cfg: DraftConfig, weights: Path) -> Draft:
    emb, head = target.embed_and_head()
    draft = Draft(target.geometry, cfg, emb, head)
    arrays = load_arrays(weights)
    d = target.geometry.hidden
    state = {k[len("draft."):]: torch.from_numpy(v) for k, v in arrays.items()
             if not k.startswith("draft.fc.")}
    state["fc.weight"] = torch.from_numpy(np.concatenate(
        [arrays[f"draft.fc.{i}.weight"] for i in range(5)], axis=1))
    assert state["fc.weight"].shape == (d, 5 * d)
    draft.load_state_dict(state)
    return draft.to(target.device)


def train_and_export(target: Target, draft: Draft, seqs: Sequences, fit_cfg: FitConfig,
                     out_dir: Path, *, eval_anchors: int = 16, max_bytes: int | None = MAX_BYTES,
                     log=print) -> dict:
    """Fit, evaluate on the held-out split, export; returns the report (also the
    ``trained`` provenance of ``dspark.json``)."""
    t0 = time.monotonic()
    res = fit(target, draft, seqs, fit_cfg, log=log)
    t1 = time.monotonic()
    ev = evaluate(target, draft, seqs, anchors=eval_anchors, seed=fit_cfg.seed + 1)
    log(f"eval: tau {ev['tau']:.3f} over {ev['anchors']} anchors of {ev['sequences']} held-out "
        f"sequences; P(accepted >= k) {ev['acceptance']}; the loop replayed on them: tau "
        f"{ev['loop']['tau']:.3f} over {ev['loop']['rounds']} rounds "
        f"({time.monotonic() - t1:.1f} s)")
    meta = seqs.meta
    trained = {
        "data": {"packages": meta.get("prompts", {}).get("packages"),
                 "prompts_seed": meta.get("prompts", {}).get("seed"),
                 "sequences": int((~seqs.eval).sum()), "held_out": int(seqs.eval.sum()),
                 "new_tokens": meta.get("new_tokens"), "generation_seconds": meta.get("seconds"),
                 "generated_tokens": meta.get("generated_tokens")},
        "fit": {**settings(fit_cfg), "steps_done": res.steps, "seconds_done": res.seconds,
                "first_loss": round(res.first_loss, 4), "last_loss": round(res.last_loss, 4),
                "wall_seconds": round(t1 - t0, 1)},
        "offline": {"tau": round(ev["tau"], 4), "acceptance": ev["acceptance"],
                    "conditional": ev["conditional"], "anchors": ev["anchors"],
                    "sequences": ev["sequences"], "seed": ev["seed"],
                    "by_source": {k: {"tau": round(v["tau"], 4), "anchors": v["anchors"],
                                      "acceptance": v["acceptance"]}
                                  for k, v in ev["by_source"].items()},
                    "loop": {"tau": round(ev["loop"]["tau"], 4), "rounds": ev["loop"]["rounds"],
                             "by_source": {k: {"tau": round(v["tau"], 4), "rounds": v["rounds"]}
                                           for k, v in ev["loop"]["by_source"].items()}}},
        "device": torch.cuda.get_device_name() if target.device.type == "cuda" else "cpu",
        "torch": torch.__version__,
    }
    cfg = dataclasses.replace(draft.cfg, trained=trained)
    size = export(out_dir, target.geometry, cfg, draft_arrays(draft), max_bytes)
    log(f"export: {out_dir}/draft.safetensors {size} bytes, dspark.json")
    return {**trained, "history": res.history, "weights_bytes": size}
