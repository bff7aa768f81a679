"""The DSpark files beside a manifest (docs/dspark.md "Files"): ``dspark.json`` (the draft's
configuration: ``block``, ``mask_token_id``, … — the manifest does not carry them) and
``draft.safetensors`` (the ``draft.*`` weights), read and checked against the manifest before
any GPU work. Every problem is a :class:`~kern_run.errors.KernRunError` line naming the file
and the JSON key or tensor."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kern_manifest import Manifest, shape_at
from kern_manifest.contract import DRAFT_WEIGHT_PREFIX, VERIFY_MAX, ContractInfo, DSparkInfo
from kern_manifest.expr import corners

from ..errors import KernRunError

CONFIG_NAME = "dspark.json"
DRAFT_NAME = "draft.safetensors"
FORMAT = "kern-dspark"
VERSION = 1
#: The number of tap layers (docs/dspark.md: 5 taps, ``draft.fc.{i}`` i = 0 … 4).
TAPS = 5


@dataclass(frozen=True)
class DSparkConfig:
    """``dspark.json`` (docs/dspark.md); ``path`` is where it was read."""

    path: Path
    target: str
    family: str
    target_layers: int
    layers: int
    block: int
    tap_layers: tuple[int, ...]
    markov_rank: int
    mask_token_id: int


def read_config(path: Path) -> DSparkConfig:
    """Read and shape-check ``dspark.json``; every bad key is one problem line."""
    where = f"`{path}`"
    try:
        doc = json.loads(path.read_text())
    except OSError as err:
        raise KernRunError(f"{where}: cannot read: {err.strerror or err}") from None
    except ValueError as err:
        raise KernRunError(f"{where}: not JSON: {err}") from None
    if not isinstance(doc, dict):
        raise KernRunError(f"{where}: the top level must be an object")
    problems = []
    if doc.get("format") != FORMAT:
        problems.append(f"{where}: `format` is {doc.get('format')!r}; expected {FORMAT!r}")
    if doc.get("version") != VERSION:
        problems.append(f"{where}: `version` is {doc.get('version')!r}; this kern-run reads "
                        f"version {VERSION}")

    def integer(key: str, lo: int) -> int:
        v = doc.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            problems.append(f"{where}: `{key}` must be an integer ≥ {lo} (got {v!r})")
            return lo
        return v

    vals = {k: integer(k, lo) for k, lo in (("target_layers", 1), ("layers", 1),
                                             ("block", 1), ("markov_rank", 1),
                                             ("mask_token_id", 0))}
    taps = doc.get("tap_layers")
    if not (isinstance(taps, list) and len(taps) == TAPS
            and all(isinstance(t, int) and not isinstance(t, bool) for t in taps)):
        problems.append(f"{where}: `tap_layers` must be a list of {TAPS} integers (got "
                        f"{taps!r})")
        taps = []
    elif not all(0 <= t < vals["target_layers"] for t in taps):
        problems.append(f"{where}: `tap_layers` {taps} must lie in 0 … target_layers − 1 = "
                        f"{vals['target_layers'] - 1}")
    if doc.get("family") not in ("llama", "qwen3"):
        problems.append(f"{where}: `family` is {doc.get('family')!r}; expected 'llama' or "
                        f"'qwen3'")
    if problems:
        raise KernRunError(*problems)
    return DSparkConfig(path=path, target=str(doc.get("target", "")), family=doc["family"],
                        tap_layers=tuple(taps), **vals)


def check_config(cfg: DSparkConfig, m: Manifest, info: ContractInfo, ds: DSparkInfo) -> None:
    """``dspark.json`` against the manifest it sits beside: the draft's layer count (the
    draft KV state pairs), the block (``draft`` takes B rows, ``verify`` B + 1), the mask
    token (inside the vocabulary), the Markov rank and the tap count (the shapes of
    ``draft.markov_w1.weight`` and the ``draft.fc.{i}.weight`` declared)."""
    where = f"`{cfg.path}`"
    problems = []
    if cfg.layers != ds.layers:
        problems.append(f"{where}: `layers` is {cfg.layers}; the manifest declares "
                        f"{ds.layers} draft layers (`draft.kv.L{{j}}` states)")
    if cfg.block != ds.block:
        problems.append(f"{where}: `block` is {cfg.block}; the manifest's `draft_tokens` has "
                        f"{ds.block} rows (the block it was generated for)")
    top = min(info.max_tokens, ds.verify_max, VERIFY_MAX)
    if cfg.block + 1 > top:
        problems.append(f"{where}: `block` is {cfg.block}; a round verifies block + 1 = "
                        f"{cfg.block + 1} tokens and `verify` takes at most {top}")
    if info.vocab is not None and cfg.mask_token_id >= info.vocab:
        problems.append(f"{where}: `mask_token_id` {cfg.mask_token_id} is outside the "
                        f"manifest's vocabulary (0 … {info.vocab - 1})")
    if ds.accept_mask is not None and ds.accept_mask != cfg.mask_token_id:
        problems.append(f"{where}: `mask_token_id` is {cfg.mask_token_id}; the manifest's "
                        f"in-graph acceptance (the last dispatch of `verify`) writes mask "
                        f"token {ds.accept_mask} into the next round's block (regenerate the "
                        f"manifest from this dspark.json)")
    w1 = m.buffers.get(f"{DRAFT_WEIGHT_PREFIX}markov_w1.weight")
    if w1 is not None and len(w1.shape) == 2 and w1.shape[1] != cfg.markov_rank:
        problems.append(f"{where}: `markov_rank` is {cfg.markov_rank}; the manifest's "
                        f"`draft.markov_w1.weight` is {list(w1.shape)}")
    fc = [n for n in ds.draft_weights if n.startswith(f"{DRAFT_WEIGHT_PREFIX}fc.")]
    if fc and len(fc) != len(cfg.tap_layers):
        problems.append(f"{where}: {len(cfg.tap_layers)} `tap_layers`; the manifest "
                        f"declares {len(fc)} `draft.fc.{{i}}.weight`")
    if problems:
        raise KernRunError(*problems)


def check_draft_file(path: Path, m: Manifest) -> None:
    """``draft.safetensors`` against the manifest's ``draft.*`` weights: each present with
    the declared dtype and shape, and no tensor the manifest does not declare (a draft of
    another shape or layer count). Reads the header only."""
    from kern_weights.errors import HeaderError
    from kern_weights.stfile import read_header
    try:
        header = read_header(path)
    except HeaderError as err:
        raise KernRunError(*(f"draft weights `{path}`: {p}"
                             for p in (err.problems or [err.message]))) from None
    _, hi = corners(m.symbols)
    want = {n: (b.dtype, list(shape_at(b.shape, hi))) for n, b in m.buffers.items()
            if b.cls == "weight" and n.startswith(DRAFT_WEIGHT_PREFIX)}
    problems = []
    for name, (dtype, shape) in want.items():
        e = header.get(name)
        if e is None:
            problems.append(f"draft weights `{path}`: no tensor `{name}` (the manifest "
                            f"declares {dtype}{shape})")
        elif e.kern_dtype != dtype or list(e.shape) != shape:
            problems.append(f"draft weights `{path}`: tensor `{name}` is "
                            f"{e.kern_dtype or e.dtype}{list(e.shape)}; the manifest "
                            f"declares {dtype}{shape}")
    for name in header:
        if name not in want:
            problems.append(f"draft weights `{path}`: tensor `{name}` is not a `draft.*` "
                            f"weight of the manifest (a draft made for another manifest?)")
    if problems:
        raise KernRunError(*problems)


@dataclass(frozen=True)
class DSparkFiles:
    """The checked DSpark files of one manifest."""

    config: DSparkConfig
    draft: Path


def dspark_files(manifest: Path, m: Manifest, info: ContractInfo, ds: DSparkInfo) -> DSparkFiles:
    """``dspark.json`` and ``draft.safetensors`` beside ``manifest``, read and checked."""
    d = manifest.parent
    missing = [f"`{d / n}`" for n in (CONFIG_NAME, DRAFT_NAME) if not (d / n).is_file()]
    if missing:
        raise KernRunError(f"the DSpark manifest `{manifest}` needs {' and '.join(missing)} "
                           f"beside it (the draft's configuration and weights, "
                           f"docs/dspark.md)")
    cfg = read_config(d / CONFIG_NAME)
    check_config(cfg, m, info, ds)
    check_draft_file(d / DRAFT_NAME, m)
    return DSparkFiles(cfg, d / DRAFT_NAME)
