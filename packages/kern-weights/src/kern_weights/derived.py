"""Derived weights: tensors computed from configuration values instead of read from the
checkpoint (an extension point; a plan names one with ``{"derived": NAME, "params": {...}}``).

A derived tensor is registered as a *preparer*: ``prepare(params, config, shape, what)`` is
called while the plan is resolved (before anything is written), checks the parameters
against the manifest's shape and raises :class:`ExportError` naming ``what`` if they do not
fit; it returns a thunk that computes the values when the writer reaches the tensor.
Parameters a plan omits come from the source's config (HF ``config.json`` keys) or from the
manifest shape.

Implementations: ``rope_cos_sin``, ``rope_inv_freq``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .arrays import Array
from .errors import ExportError

Thunk = Callable[[], Array]
Preparer = Callable[[Mapping[str, Any], Mapping[str, Any], tuple[int, ...], str], Thunk]

DERIVED: dict[str, Preparer] = {}


def register(name: str) -> Callable[[Preparer], Preparer]:
    def deco(fn: Preparer) -> Preparer:
        DERIVED[name] = fn
        return fn
    return deco


def _number(params: Mapping[str, Any], key: str, what: str, *, integer: bool,
            default: Any = None, config: Mapping[str, Any] | None = None,
            config_key: str | None = None) -> Any:
    if key in params:
        v, origin = params[key], "plan"
    elif config is not None and config_key and config.get(config_key) is not None:
        v, origin = config[config_key], f"config `{config_key}`"
    elif default is not None:
        v, origin = default, "manifest shape"
    else:
        alt = f" or as `{config_key}` in the config" if config_key else ""
        raise ExportError(f"{what}: parameter `{key}` is needed (give it in the plan's "
                          f"`params`{alt})")
    ok = isinstance(v, int) if integer else isinstance(v, int | float)
    if isinstance(v, bool) or not ok or v <= 0:
        kind = "a positive integer" if integer else "a positive number"
        raise ExportError(f"{what}: `{key}` = {v!r} (from the {origin}) is not {kind}")
    return v


def _rope_common(kind: str, params: Mapping[str, Any], config: Mapping[str, Any],
                 shape: tuple[int, ...], what: str, allowed: set[str], ndim: int,
                 layout: str) -> tuple[float, Mapping[str, Any]]:
    """Checks every rope kind shares; returns ``theta`` and the config with ``rope_theta``
    resolved (transformers 5 may keep it under ``rope_parameters``)."""
    unknown = set(params) - allowed
    if unknown:
        raise ExportError(f"{what}: unknown {kind} parameter(s) {', '.join(sorted(unknown))}")
    if config.get("rope_scaling"):
        raise ExportError(f"{what}: the config sets rope_scaling {config['rope_scaling']!r}; "
                          f"{kind} only computes unscaled ropes")
    if len(shape) != ndim:
        raise ExportError(f"{what}: {kind} makes a {ndim}-d {layout} tensor; the manifest "
                          f"declares {list(shape)}")
    cfg = dict(config)
    if cfg.get("rope_theta") is None and isinstance(cfg.get("rope_parameters"), dict):
        cfg["rope_theta"] = cfg["rope_parameters"].get("rope_theta")
    theta = float(_number(params, "theta", what, integer=False, config=cfg,
                          config_key="rope_theta"))
    return theta, cfg


@register("rope_cos_sin")
def rope_cos_sin(params: Mapping[str, Any], config: Mapping[str, Any],
                 shape: tuple[int, ...], what: str) -> Thunk:
    """Rotary-embedding table ``[max_positions, head_dim]``: row ``p`` is
    ``cos(p·f_0) … cos(p·f_{d/2-1}), sin(p·f_0) … sin(p·f_{d/2-1})`` with
    ``f_i = theta^(-2i/d)`` (vLLM's ``cos_sin_cache`` layout; HF's half-rotation pairing).
    Computed in float64, then converted to the manifest dtype.

    params: ``theta`` (config ``rope_theta``), ``head_dim`` (config ``head_dim``, else the
    shape), ``max_positions`` (the shape's first dimension). A config with ``rope_scaling``
    set is refused: scaled ropes are not implemented."""
    theta, cfg = _rope_common("rope_cos_sin", params, config, shape, what,
                              {"theta", "head_dim", "max_positions"}, 2,
                              "[max_positions, head_dim]")
    d = _number(params, "head_dim", what, integer=True, default=shape[1], config=cfg,
                config_key="head_dim")
    n = _number(params, "max_positions", what, integer=True, default=shape[0])
    if d % 2:
        raise ExportError(f"{what}: head_dim {d} is odd")
    if (n, d) != shape:
        raise ExportError(f"{what}: rope_cos_sin with max_positions={n}, head_dim={d} is "
                          f"{[n, d]}; the manifest declares {list(shape)}")

    def compute() -> Array:
        inv = theta ** -(np.arange(0, d, 2, dtype=np.float64) / d)
        ang = np.arange(n, dtype=np.float64)[:, None] * inv[None, :]
        return Array(np.concatenate([np.cos(ang), np.sin(ang)], axis=1), "f64")

    return compute


@register("rope_inv_freq")
def rope_inv_freq(params: Mapping[str, Any], config: Mapping[str, Any],
                  shape: tuple[int, ...], what: str) -> Thunk:
    """HF's default-rope ``inv_freq`` ``[head_dim/2]`` in float32, computed as HF does:
    ``1 / theta ** (arange(0, d, 2) / d)`` with every step in float32 (the model's
    ``rotary_emb.inv_freq`` buffer, which checkpoints and GGUF files do not carry).

    params: ``theta`` (config ``rope_theta`` or ``rope_parameters.rope_theta``), ``head_dim``
    (config ``head_dim``, else twice the shape)."""
    theta, cfg = _rope_common("rope_inv_freq", params, config, shape, what,
                              {"theta", "head_dim"}, 1, "[head_dim/2]")
    d = _number(params, "head_dim", what, integer=True, default=2 * shape[0], config=cfg,
                config_key="head_dim")
    if d % 2 or d // 2 != shape[0]:
        raise ExportError(f"{what}: head_dim {d} gives [{d // 2}] (d must be even); the "
                          f"manifest declares {list(shape)}")

    def compute() -> Array:
        x = np.arange(0, d, 2, dtype=np.int64).astype(np.float32) / np.float32(d)
        inv = np.float32(1.0) / np.power(np.float32(theta), x, dtype=np.float32)
        return Array(inv.astype(np.float32), "f32")

    return compute
