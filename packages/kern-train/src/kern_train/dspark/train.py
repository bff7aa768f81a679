"""The training loop: seeded, AdamW, linear warmup then cosine to ``min_lr_ratio``, bf16
autocast on CUDA (fp32 on the CPU), gradient clipping at 1.

One step: S training sequences (seeded draw), the target's no-grad forward (5 taps, final
hidden), N anchors per sequence, the target logits at the block rows, the draft's
teacher-forced logits, :func:`~.loss.dspark_loss`. The schedule's progress is the larger of
step / steps and elapsed / seconds, so a time budget anneals the learning rate fully too; the
loop stops at whichever limit comes first.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from .batches import labels, make_batch, rows_of
from .config import DSparkError
from .data import Sequences
from .loss import dspark_loss
from .model import Draft
from .target import Target


@dataclass(frozen=True)
class FitConfig:
    steps: int = 1000
    seconds: float = 300.0
    batch: int = 32           # sequences per step
    anchors: int = 32         # blocks per sequence
    lr: float = 1e-3
    warmup: int = 50
    min_lr_ratio: float = 0.05
    weight_decay: float = 0.0
    seed: int = 0
    log_every: int = 50
    #: ((source, weight), ...): a training sequence of that source is drawn ``weight`` times
    #: as often as one of weight 1 (the others); () = uniform over the training split
    source_weights: tuple[tuple[str, float], ...] = ()


@dataclass
class FitResult:
    steps: int
    seconds: float
    first_loss: float
    last_loss: float          # mean over the last log window
    history: list[dict]       # one entry per log window


def lr_factor(progress: float, step: int, cfg: FitConfig) -> float:
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    p = min(max(progress, 0.0), 1.0)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p))


def row_probabilities(seqs: Sequences, train: np.ndarray,
                      weights: tuple[tuple[str, float], ...]) -> np.ndarray | None:
    """P(row) for each of the ``train`` rows under ``weights`` (None: uniform, the draw
    without weights stays the same). Refuses a source no training row has, or a weight ≤ 0."""
    if not weights:
        return None
    src = seqs.sources()[train]
    known = sorted(set(src.tolist()))
    w = np.ones(len(train))
    for name, x in weights:
        if name not in known:
            raise DSparkError(f"--source-weight {name}={x:g}: no training sequence has source "
                              f"`{name}` (the data's sources: {', '.join(known) or 'none'})")
        if not (x > 0 and math.isfinite(x)):
            raise DSparkError(f"--source-weight {name}={x:g}: expected a finite weight > 0")
        w[src == name] = x
    return w / w.sum()


def step_loss(target: Target, draft: Draft, seqs: Sequences, rows: np.ndarray,
              cfg: FitConfig, gen: torch.Generator) -> tuple[torch.Tensor, dict, torch.Tensor]:
    """(loss, stats, valid) of one batch; autocast as the device allows."""
    B = draft.cfg.block
    dev = target.device
    b = make_batch(seqs, rows, cfg.anchors, B, gen, dev)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dev.type == "cuda"):
        taps, last = target.taps(b.tokens, draft.cfg.tap_layers)
        t_logits = target.logits(rows_of(last, b.anchors, B))
        logits = draft(taps.float() if dev.type != "cuda" else taps, b.tokens, b.anchors)
    loss, stats = dspark_loss(logits, t_logits, labels(b, B), b.valid)
    return loss, stats, b.valid


def fit(target: Target, draft: Draft, seqs: Sequences, cfg: FitConfig, log=print) -> FitResult:
    train = np.flatnonzero(~seqs.eval)
    if len(train) == 0:
        raise ValueError("no training sequences")
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    pick = np.random.default_rng(cfg.seed)
    prob = row_probabilities(seqs, train, cfg.source_weights)
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    t0 = time.monotonic()
    history: list[dict] = []
    window: list[torch.Tensor] = []
    first = None
    step = 0
    while step < cfg.steps and time.monotonic() - t0 < cfg.seconds:
        progress = max(step / cfg.steps, (time.monotonic() - t0) / cfg.seconds)
        for grp in opt.param_groups:
            grp["lr"] = cfg.lr * lr_factor(progress, step, cfg)
        rows = pick.choice(train, size=min(cfg.batch, len(train)), replace=False, p=prob)
        loss, stats, _ = step_loss(target, draft, seqs, rows, cfg, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        window.append(torch.stack([loss.detach(), stats["ce"], stats["tv"]]))
        step += 1
        if first is None:
            first = float(loss.detach())
        if step % cfg.log_every == 0 or step == cfg.steps:
            m = torch.stack(window).mean(0).tolist()
            window = []
            history.append({"step": step, "seconds": round(time.monotonic() - t0, 1),
                            "loss": m[0], "ce": m[1], "tv": m[2],
                            "lr": opt.param_groups[0]["lr"]})
            log(f"fit: step {step} {history[-1]['seconds']:.0f} s loss {m[0]:.4f} "
                f"ce {m[1]:.3f} tv {m[2]:.3f} lr {history[-1]['lr']:.2e}")
    if window:
        m = torch.stack(window).mean(0).tolist()
        history.append({"step": step, "seconds": round(time.monotonic() - t0, 1),
                        "loss": m[0], "ce": m[1], "tv": m[2], "lr": opt.param_groups[0]["lr"]})
    secs = time.monotonic() - t0
    log(f"fit: {step} steps in {secs:.1f} s")
    return FitResult(steps=step, seconds=round(secs, 1), first_loss=first or float("nan"),
                     last_loss=history[-1]["loss"] if history else float("nan"),
                     history=history)


def settings(cfg: FitConfig) -> dict:
    return asdict(cfg)
