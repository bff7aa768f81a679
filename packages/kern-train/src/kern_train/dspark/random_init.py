"""Seeded random draft weights for plumbing tests (``kern-train random``), numpy only: every
matrix N(0, std²) (std 0.02, the usual init), every norm weight 1, for any target geometry
(its HF ``config.json``). The output is the same two files a trained draft has, with
``trained: null``."""

from __future__ import annotations

import numpy as np

from .config import DraftConfig, Geometry, tap_layers, weight_shapes

STD = 0.02


def random_config(g: Geometry, target: str, *, layers: int, markov_rank: int,
                  mask_token_id: int, seed: int) -> DraftConfig:
    return DraftConfig(target=target, family=g.family, target_layers=g.layers, layers=layers,
                       tap_layers=tap_layers(g.layers), markov_rank=markov_rank,
                       mask_token_id=mask_token_id, seed=seed, trained=None)


def random_arrays(g: Geometry, cfg: DraftConfig, std: float = STD) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(cfg.seed)
    out = {}
    for name, shape in weight_shapes(g, cfg.layers, cfg.markov_rank).items():
        if name.endswith("norm.weight"):
            out[name] = np.ones(shape, dtype=np.float32)
        else:
            out[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
    return out
