"""The generator: facts -> assertions -> wiring -> manifest, plan, kernels, report.

Nothing is written unless every assertion held and the manifest verifies clean.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import kern_manifest
from kern_manifest.contract import ContractError, check_manifest

from . import config as C
from . import fuse as FU
from . import fuse_norm as FN
from . import own_norm as ON
from . import fuse_rope as FR
from . import fuse_rope_attention as FRA
from . import merge as M
from . import repo
from .arch import ARCHS, INV_FREQ, Arch
from .assemble import Assembler
from .errors import WiringError
from .facts import Facts, load
from .fuse_norm import DEFAULT_FUSE_NORM
from .gemm import ACC_IMPLS, DEFAULT_ACC, DEFAULT_GEMM, OWN_GEMV, check_impl
from .own import (DEFAULT_ATTENTION, DEFAULT_VERIFY_ATTENTION, DEFAULT_VERIFY_SPLITS,
                  VERIFY_ATTENTION, parse_verify_splits)
from .kv import LAYOUT, KVLayout
from .ir import Program
from .programs import FEW_ROWS, build
from .readme import readme
from .wiring import Inputs



TOKENS_MAX = 2048
"""Default ``tokens.max``: the largest prefill chunk (and the rows workspaces are sized for);
the context is the capacity the caller picks, not this."""


class Extension(Protocol):
    """A manifest that extends the target's (``kern-gen dspark``): its own programs over the
    same wiring inputs, the weights and states the capture does not hold, a report section."""

    def check(self, cfg: C.ModelConfig) -> None: ...
    def programs(self, g: Inputs) -> list[Program]: ...
    def weights(self, cfg: C.ModelConfig) -> dict[str, list[int]]: ...
    def states(self, kv: KVLayout) -> dict[str, int]: ...
    def readme(self, asm: Assembler, programs: list[Program]) -> str: ...


@dataclass
class Result:
    manifest: bytes
    plan: bytes
    readme: bytes
    cubins: dict[str, bytes]


def _build_own(nvcc: str | None, defines: tuple[str, ...] = ()) -> dict[str, bytes]:
    """The own kernels, built from the checkout's ``packages/kern-gen/kernels/`` (refused in
    one line without a checkout or nvcc, or when nvcc fails); ``defines``: extra ``-D`` macros
    of a lever's variant build (kernels/variant_lever.py)."""
    build_py = repo.find(repo.MARKER, "own kernels' build script")
    spec = importlib.util.spec_from_file_location("kern_gen_kernels_build", build_py)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with tempfile.TemporaryDirectory(prefix="kern-gen-own-") as tmp:
        try:
            mod.build(Path(tmp), nvcc, defines=defines)
        except (FileNotFoundError, RuntimeError) as exc:
            raise WiringError(f"own kernels ({build_py.parent}): {exc}") from None
        return {p.name: p.read_bytes() for p in sorted(Path(tmp).glob("*.cubin"))}


def _match_sidecar(facts: Facts, group: int) -> list[int] | None:
    """Token count of each forward of ``group`` according to the sidecar
    (:meth:`.facts.Facts.sidecar_forward`).  None when no pass of the group lies in a
    measured forward: the group is the tail of the unmeasured runs that the trimmed capture
    keeps before each request (the sidecar lists those as ``warmup_requests``)."""
    g = facts.group(group)
    fwds = [facts.sidecar_forward(pi) for pi in g.forwards]
    out = [int(f["tokens"]) if f else None for f in fwds]
    if all(t is None for t in out):
        return None
    if any(t is None for t in out):
        pi = g.forwards[out.index(None)]
        raise WiringError(f"group {group}, pass {pi}: no measured sidecar forward contains its "
                          f"mid time, while other passes of the group are measured forwards")
    return out  # type: ignore[return-value]


def choose_groups(facts: Facts) -> tuple[int, int]:
    """decode = the group whose every forward is a 1-token forward (sidecar); prefill = the
    dynamic group (token reference, fitted grids) with the most distinct token counts; the
    mined token counts must equal the sidecar's."""
    decode, prefill, best = None, None, 0
    for g in facts.mined.groups:
        sc = _match_sidecar(facts, g.index)
        if sc is None:
            continue
        if all(t == 1 for t in sc):
            decode = g.index if decode is None else decode
            continue
        if g.reference.site is None:
            continue
        if [int(t) if t is not None else None for t in g.tokens] != sc:
            raise WiringError(f"group {g.index}: kern-mine's token counts {g.tokens} differ "
                              f"from the sidecar's {sc} (wrong token reference)")
        if len(set(sc)) > best:
            prefill, best = g.index, len(set(sc))
    if decode is None or prefill is None:
        raise WiringError(f"no decode group (all forwards 1 token) or no dynamic prefill group "
                          f"in {facts.mined.capture}")
    return decode, prefill


def _fused(programs: list[Program], cfg: C.ModelConfig, arch: Arch,
           norms: bool, fold_rope: bool = False, own_norms: bool = False) -> list[Program]:
    """The few-row programs with the fused GEMVs (:mod:`.fuse`) and, where a Llama layer's
    rope kernels are provably the plain rotate-half rope, one rope + K/V launch
    (:mod:`.fuse_rope`), with ``fold_rope`` folded into decode's attention where provable
    (:mod:`.fuse_rope_attention`); with ``norms`` also the RMSNorms split between the GEMVs
    around them (:mod:`.fuse_norm`, its :data:`~.fuse_norm.PROGRAMS`), with ``own_norms``
    each RMSNorm an own launch instead (:mod:`.own_norm`)."""
    out = []
    for p in programs:
        if p.name in FEW_ROWS:
            p = FR.fuse_rope(FU.fuse_program(p), cfg)[0]
            if fold_rope:
                p = FRA.fold(p)[0]
        if norms and p.name in FN.PROGRAMS:
            p = FN.fuse_norms(p, cfg, arch)
        if own_norms and p.name in ON.PROGRAMS:
            p = ON.own_norms(p, cfg, arch)
        out.append(p)
    return out


def _captured_cache_len(facts: Facts, cfg: C.ModelConfig) -> int:
    """The captured cache's positions, refused unless it is HF StaticCache in kern's
    token-major layout holding the model's whole position limit."""
    cache = facts.sidecar["cache"]
    if cache.get("kind") != "static":
        raise WiringError(f"sidecar cache kind {cache.get('kind')!r}: the wiring assumes HF "
                          f"StaticCache")
    if cache.get("layout") != LAYOUT:
        raise WiringError(f"sidecar cache layout {cache.get('layout', 'head-major')!r}: the "
                          f"capture was made with transformers' StaticCache [1, kv_heads, L, "
                          f"head_dim], whose writers bake the capacity L into every address; "
                          f"recapture with `capture/models/hf_capture.py --cache-layout "
                          f"{LAYOUT}` (capture/README.md)")
    max_len = int(cache["max_len"])
    if max_len != cfg.max_positions:
        raise WiringError(f"the captured cache holds {max_len} positions, the model's limit "
                          f"(max_position_embeddings) is {cfg.max_positions}: capture at the "
                          f"model's limit so that every capacity up to it is covered")
    return max_len


def _check_choices(gemm: str, gemm_acc: str, verify_splits: str, verify_attention: str) -> None:
    check_impl(gemm)
    if gemm_acc not in ACC_IMPLS:
        raise WiringError(f"--gemm-acc `{gemm_acc}`: choose one of {', '.join(ACC_IMPLS)}")
    try:
        parse_verify_splits(verify_splits, 1)
    except ValueError as e:
        raise WiringError(str(e)) from None
    if verify_attention not in VERIFY_ATTENTION:
        raise WiringError(f"--verify-attention `{verify_attention}`: choose one of "
                          f"{', '.join(VERIFY_ATTENTION)}")


def _norm_choice(fuse_norm: bool | None, gemm: str, fuse: bool, extension: bool) -> bool:
    """``--fuse-norm`` resolved: None is the default where it applies (never with an
    extension); asked for, it needs the register GEMV and ``fuse``."""
    if fuse_norm is None:
        return DEFAULT_FUSE_NORM and not extension and gemm == "gemv" and fuse
    if fuse_norm and not (gemm == "gemv" and fuse):
        raise WiringError("--fuse-norm needs --gemm gemv and --fuse: the norm goes into the "
                          "own GEMVs (kernels/gemv_norm.cu; the bulk-copy GEMV has no such "
                          "variant)")
    return fuse_norm


def _norm_choices(fuse_norm: bool | None, own_norm: bool | None, gemm: str, fuse: bool,
                  extension: bool, model_type: str) -> tuple[bool, bool]:
    """``--fuse-norm`` resolved (:func:`_norm_choice`) and ``--own-norm`` resolved (None:
    :data:`~.own_norm.DEFAULT_OWN_NORM` for ``model_type`` where it applies) and checked: one
    norm choice, the fused few-row programs it rewrites (:mod:`.own_norm` proves its pattern
    on them), and never with an extension (a DSpark manifest's plain ``decode`` is the
    reference of its ``decode_spec``)."""
    fused = _norm_choice(fuse_norm, gemm, fuse, extension)
    if own_norm is None:
        own_norm = (ON.DEFAULT_OWN_NORM.get(model_type, False) and not fused
                    and not extension and gemm in OWN_GEMV and fuse)
    if not own_norm:
        return fused, False
    if fused:
        raise WiringError("--own-norm and --fuse-norm exclude each other: a norm is either "
                          "its own launch or split between the GEMVs around it")
    if extension or gemm not in OWN_GEMV or not fuse:
        raise WiringError("--own-norm needs an own GEMV (--gemm gemv, splitk or tma) and "
                          "--fuse, and no extension")
    return False, True


def generate(capture: Path, config: Path | None, *, mined: Path | None = None,
             sidecar: Path | None = None, tokens_max: int | None = None,
             label: str = "", command: str = "", nvcc: str | None = None,
             own_cubins: dict[str, bytes] | None = None, gemm: str = DEFAULT_GEMM,
             attention: str = DEFAULT_ATTENTION, extension: Extension | None = None,
             fuse: bool = True, fuse_norm: bool | None = None, own_norm: bool | None = None,
             gemm_acc: str = DEFAULT_ACC,
             verify_splits: str = DEFAULT_VERIFY_SPLITS,
             verify_attention: str = DEFAULT_VERIFY_ATTENTION) -> Result:
    """``gemm`` / ``gemm_acc``: the few-row programs' GEMM / C += A·Wᵀ implementation
    (:mod:`.gemm`), with ``fuse`` their fusions and ``fuse_norm`` the RMSNorms in the
    GEMVs (:mod:`.fuse_norm`; None: :data:`~.fuse_norm.DEFAULT_FUSE_NORM` with ``gemm``
    gemv and ``fuse``, never with an ``extension``: a DSpark manifest's plain ``decode`` is
    the lossless reference of its ``decode_spec`` and ``verify``, which keep the captured
    norms; ``own_norm``: each RMSNorm of ``decode`` an own launch instead of the captured
    kernel, :mod:`.own_norm`; None: its default for the model); ``attention``: the decode
    attention (:data:`.own.DECODE_ATTENTION`), ``verify_splits`` its key splits in verify and
    the draft (:data:`.own.VERIFY_SPLITS`) and ``verify_attention`` its kernel there
    (:data:`.own.VERIFY_ATTENTION`); ``extension``: its programs replace the plain ones."""
    _check_choices(gemm, gemm_acc, verify_splits, verify_attention)
    facts = load(capture, mined, sidecar)
    captured = C.from_hf(facts.sidecar["config"], "sidecar config")
    cfg = C.load(config) if config else captured
    C.compare(cfg, captured, str(config or "sidecar config"))
    fuse_norm, own_norm = _norm_choices(fuse_norm, own_norm, gemm, fuse, extension is not None,
                                        cfg.model_type)
    if cfg.model_type not in ARCHS:
        raise WiringError(f"model_type {cfg.model_type!r}: the wiring covers {sorted(ARCHS)}")
    arch = ARCHS[cfg.model_type]
    max_len = _captured_cache_len(facts, cfg)
    tmax = tokens_max or min(max_len, TOKENS_MAX)
    if tmax > max_len:
        raise WiringError(f"tokens.max {tmax} exceeds the captured cache length {max_len}")
    dg, pg = choose_groups(facts)
    kv = KVLayout.of(cfg, max_len)
    g = Inputs(facts, cfg, arch, kv, dg, pg)
    if extension is not None:
        extension.check(cfg)
    programs = build(g) if extension is None else extension.programs(g)
    if gemm in OWN_GEMV and fuse:
        programs = _fused(programs, cfg, arch, fuse_norm, attention == "cluster-rope",
                          own_norm)
    own = own_cubins if own_cubins is not None else _build_own(nvcc)
    asm = Assembler(facts, cfg, kv, own, label or f"{cfg.model_type} (kern-gen)",
                    merged=M.merged_weights(cfg), gemm_impl=gemm, attention=attention,
                    acc_impl=gemm_acc, verify_splits=verify_splits,
                    verify_attention=verify_attention,
                    extra_weights=extension.weights(cfg) if extension else None,
                    extra_states=extension.states(kv) if extension else None)
    doc = asm.manifest(programs, tmax)
    man = kern_manifest.from_obj(doc)
    diags = kern_manifest.verify(man)
    if diags:
        raise WiringError("generated manifest does not verify:\n" +
                          kern_manifest.render_human(diags))
    try:        # the manifest a caller of the contract (kern-run) will accept
        check_manifest(man)
    except ContractError as err:
        raise WiringError("generated manifest breaks the caller contract:\n" +
                          "\n".join(err.problems)) from None
    mbytes = kern_manifest.encode(man) + b"\n"
    cubins = _cubins(asm, facts, own)
    plan = {"version": 1, "weights": {**M.plan_entries(), INV_FREQ: {
        "derived": "rope_inv_freq", "params": {"theta": cfg.rope_theta,
                                               "head_dim": cfg.head_dim}}}}
    pbytes = (json.dumps(plan, indent=1) + "\n").encode()
    text = readme(facts, cfg, arch, asm, programs, dg, pg, kv, tmax, command)
    if extension is not None:
        text += extension.readme(asm, programs)
    return Result(mbytes, pbytes, text.encode(), cubins)


def _cubins(asm: Assembler, facts: Facts, own: dict[str, bytes]) -> dict[str, bytes]:
    """Every cubin the manifest names, by file: the own kernels' build, the mined ones from
    the capture (each must hash to its module name)."""
    cubins: dict[str, bytes] = {}
    for file, src in sorted(asm.cubins.items()):
        if src.origin == "own":
            cubins[file] = own[file]
            continue
        data = facts.capture.module_bytes(src.module or "")
        if data is None:
            raise WiringError(f"capture has no cubin for module {src.module}")
        if hashlib.sha256(data).hexdigest() != src.module:
            raise WiringError(f"module {src.module}: the capture's cubin does not hash to its "
                              f"name")
        cubins[file] = data
    return cubins


def write(result: Result, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    kdir = out / "kernels"
    if kdir.exists():
        shutil.rmtree(kdir)
    kdir.mkdir()
    for name, data in result.cubins.items():
        (kdir / name).write_bytes(data)
    (out / "manifest.json").write_bytes(result.manifest)
    (out / "export-plan.json").write_bytes(result.plan)
    (out / "README.md").write_bytes(result.readme)


