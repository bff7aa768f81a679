"""Ops -> manifest (dict), export plan and the list of cubins to write.

Contracts (docs/caller-contract.md): symbol ``tokens``; per-token KV states; inputs ``token_ids``
(i64 [tokens]), ``positions`` (i64 [tokens]), ``pos0`` (i32 [1]); outputs ``next_token``
(i64 [1]), ``logits`` (bf16 [1, vocab]) and ``predictions`` (i64 [tokens]); the programs are
:data:`.programs.PROGRAMS`, in that order.  Weight buffers are named like the HF tensors,
except the merged projections ``self_attn.qkv_proj`` and ``mlp.gate_up_proj`` (rows
concatenated, export plan ``concat``; :mod:`.merge`); ``model.rotary_emb.inv_freq`` is a
derived weight (export plan ``rope_inv_freq``).

Each op becomes one dispatch through ``EMIT[op.kind]``: mined kernels (the captured cubin and
ABI), GEMMs (:mod:`.gemm`: cuBLASLt, or the own GEMV in the few-row programs) and the own
kernels (:mod:`.own`); every kernel step is built by :func:`step`.

KV states (one per layer's K and V, ``bytes_per_token`` each), the positions' domain (the
writers' compiled bound) and the attention kernels' strides come from the one
:class:`.kv.KVLayout` the wiring binds the cache writers with.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Callable

from . import falsify as F
from . import gemm as G
from . import attn_cluster as AC
from . import own, own_norm, own_rope, sass
from .arch import INV_FREQ
from .config import ModelConfig
from .errors import WiringError
from .facts import Facts
from .accept import accept
from .markov import markov
from .ir import (BLOCK_TABLE, CARRY, KV_LENS, LOGITS, NEXT_TOKEN, POS0, POSITIONS, PREDICTIONS, SLOTS,
                 TOK, TOKEN_IDS, Op,
                 Program, Ref, is_weight, used_buffers)
from .kv import KVLayout
from . import pdl_order   # SMALL_EARLY_BYTES read at use: variant_lever.py --set changes it
from .pdl_order import early_triggers, order_problems, small_early_triggers
from kern_manifest.contract import PAGE_TOKENS


@dataclass
class CubinSource:
    file: str
    origin: str            # "mined" | "own"
    module: str | None     # capture module sha256 (mined)
    symbols: set[str]


def step(symbol: str, params: list[str], block: list, grid: list, args: list, *,
         cubin: str | None = None, sha256: str | None = None, shared_mem: Any = 0,
         pdl: bool = False) -> dict[str, Any]:
    """One step of a manifest kernel's impl: ``symbol`` in ``cubin`` (pinned by ``sha256``;
    mined and own kernels) or an extern (``extern:…``, no cubin); ``shared_mem`` (bytes or an
    expression of ``tokens``) only when not 0; ``pdl`` (launch with programmatic dependent
    launch) only when the kernel's code waits on the grid dependency (:mod:`.sass`)."""
    s: dict[str, Any] = {"symbol": symbol}
    if cubin is not None:
        s.update(cubin=cubin, sha256=sha256)
    s.update(params=params, block=block, grid=grid)
    if shared_mem != 0:
        s["shared_mem"] = shared_mem
    if pdl:
        s["pdl"] = True
    s["args"] = args
    return s


class Assembler:
    def __init__(self, facts: Facts, cfg: ModelConfig, kv: KVLayout, own: dict[str, bytes],
                 label: str, merged: dict[str, list[tuple[str, int]]] | None = None,
                 gemm_impl: str = "cublaslt", attention: str = "split",
                 acc_impl: str = "cublaslt", verify_splits: str = "divided",
                 verify_attention: str = "split",
                 extra_weights: dict[str, list[int]] | None = None,
                 extra_states: dict[str, int] | None = None) -> None:
        self.facts, self.cfg, self.kv = facts, cfg, kv
        self.merged = merged or {}      # merged weight -> [(part, first row)]
        # weights the capture does not hold (a DSpark draft's): name -> bf16 shape
        self.extra_weights = extra_weights or {}
        self.extra_states = extra_states or {}   # state name -> bytes per token
        self.own = own                  # own cubin file -> its built bytes
        self.own_sha = {k: hashlib.sha256(v).hexdigest() for k, v in own.items()}
        self._facts: dict[tuple[str, str], sass.PdlFacts] = {}   # (cubin, symbol) -> code's
        self.state_first: set[tuple[str, str]] = set()   # own steps checked by pdl_order
        self.gemm_impl = gemm_impl      # the few-row programs' GEMMs (gemm.GEMM_IMPLS)
        self.attention = attention      # the decode attention (own.DECODE_ATTENTION)
        self.acc_impl = acc_impl        # the few-row programs' C += A·Wᵀ (gemm.ACC_IMPLS)
        self.verify_splits = verify_splits   # own.VERIFY_SPLITS
        self.verify_attention = verify_attention   # own.VERIFY_ATTENTION
        self.kernels: dict[str, dict[str, Any]] = {}
        self._kernel_keys: dict[str, str] = {}
        self.buffers: dict[str, dict[str, Any]] = {}
        self.cubins: dict[str, CubinSource] = {}
        self.sources: dict[str, str] = {}        # kernel name -> source line for the report
        self.label = label
        self.programs: list[str] = []            # program names, in manifest order
        self.dispatch_counts: dict[str, list[int]] = {}   # kernel -> dispatches per program

    # --- buffers --------------------------------------------------------------------------
    def _buf(self, name: str, dtype: str, shape: list, cls: str) -> None:
        self.buffers.setdefault(name, {"dtype": dtype, "shape": shape, "class": cls})

    def arg(self, ref: Ref) -> dict[str, Any]:
        """The dispatch argument of ``ref`` (declaring the weight it names)."""
        if ref.state:
            return ({"state": ref.state, "offset": ref.offset} if ref.offset
                    else {"state": ref.state})
        if is_weight(ref.buf):
            self._weight(ref.buf)
        return {"buf": ref.buf, "offset": ref.offset} if ref.offset else {"buf": ref.buf}

    def _weight(self, name: str) -> None:
        if name in self.extra_weights:
            self._buf(name, "bf16", list(self.extra_weights[name]), "weight")
            return
        if name in self.merged:
            parts = [self.facts.weights[p] for p, _ in self.merged[name]]
            if (len({(t.dtype, tuple(t.shape[1:])) for t in parts}) != 1
                    or parts[0].dtype != "bfloat16"):
                raise WiringError(f"merged weight `{name}`: its parts differ in dtype or row "
                                  f"shape, or are not bf16")
            self._buf(name, "bf16", [sum(t.shape[0] for t in parts), *parts[0].shape[1:]],
                      "weight")
            return
        t = self.facts.weights[name]
        dt = {"bfloat16": "bf16", "float32": "f32"}.get(t.dtype)
        if dt is None or (dt == "f32") != (name == INV_FREQ):
            raise WiringError(f"sidecar weight `{name}` is {t.dtype}; the wiring binds "
                              f"{'f32' if name == INV_FREQ else 'bf16'}")
        self._buf(name, dt, list(t.shape), "weight")

    def dtype_of(self, ref: Ref) -> str:
        if ref.buf in self.buffers:
            return self.buffers[ref.buf]["dtype"]
        if ref.buf in (POSITIONS.buf, SLOTS.buf):
            return "i64"
        if ref.buf == INV_FREQ:
            return "f32"
        if is_weight(ref.buf):
            return "bf16"
        raise WiringError(f"internal: buffer `{ref.buf}` not declared")

    # --- kernels --------------------------------------------------------------------------
    def kernel(self, base: str, body: dict[str, Any], source: str) -> str:
        """The name of the kernel ``body`` (declared once per distinct body, ``base``,
        ``base.2``, ...); ``source``: its line in the report."""
        key = json.dumps(body, sort_keys=True)
        if key in self._kernel_keys:
            return self._kernel_keys[key]
        name, n = base, 2
        while name in self.kernels:
            name, n = f"{base}.{n}", n + 1
        self.kernels[name] = body
        self._kernel_keys[key] = name
        self.sources[name] = source
        return name

    def kernel_named(self, name: str, body: dict[str, Any], source: str) -> str:
        """Declare the kernel ``name`` exactly (no merging with equal bodies of other names:
        the name is the caller's key); declaring it again must give the same body."""
        if name in self.kernels:
            if self.kernels[name] != body:
                raise WiringError(f"internal: kernel `{name}` declared with two bodies")
            return name
        self.kernels[name] = body
        self.sources[name] = source
        return name

    def own_step(self, file: str, symbol: str, weights_first: bool = False,
                 state_first: bool = False, **kw: Any) -> dict[str, Any]:
        """A step of an own kernel (``kernels/<file>``, pinned by its built sha256), with
        ``pdl`` where its code waits on the grid dependency before any memory access
        (``weights_first``: its source reads only weights before the wait, so the wait
        alone is required; :func:`.sass.pdl_wait`).  ``state_first``: its source may also
        read inputs and earlier programs' state before the wait; the wait is required here
        and the launch order in every program by :mod:`.pdl_order`."""
        if file not in self.own_sha:
            raise WiringError(f"own kernel `{file}` was not built (kernels/{file[:-6]}.cu)")
        self.cubins.setdefault(file, CubinSource(file, "own", None, set())).symbols.add(symbol)
        if state_first:
            self.state_first.add((file, symbol))
        pdl = self.pdl(file, symbol, lambda: self.own[file], f"own kernel `{symbol}` ({file})",
                       weights_first=weights_first or state_first)
        return step(symbol, cubin=file, sha256=self.own_sha[file], pdl=pdl, **kw)

    def pdl(self, file: str, symbol: str, cubin: Callable[[], bytes | None], where: str,
            weights_first: bool = False) -> bool:
        """May ``symbol`` of ``file`` launch with PDL (:func:`.sass.pdl_wait`)?  Read once
        per function: ``cubin`` (the bytes, e.g. decompressed from the capture) is called only
        on the first ask."""
        key = (file, symbol)
        if key not in self._facts:
            data = cubin()
            if data is None:
                raise WiringError(f"{where}: no cubin `{file}` (the capture's module or the "
                                  f"own build) to read its code from")
            try:
                self._facts[key] = sass.pdl_facts(data, symbol)
            except sass.CubinError as exc:
                raise WiringError(f"{where}: reading its code for the grid-dependency wait: "
                                  f"{exc}") from None
        return sass.pdl_allowed(self._facts[key], weights_first=weights_first)

    @staticmethod
    def extern_step(symbol: str, **kw: Any) -> dict[str, Any]:
        """A step of a runtime built-in (``extern:…``, no cubin)."""
        return step(symbol, **kw)

    # --- whole manifest -------------------------------------------------------------------
    def manifest(self, programs: list[Program], tokens_max: int) -> dict[str, Any]:
        cfg = self.cfg
        self._inputs()
        self._buf(NEXT_TOKEN.buf, "i64", ["tokens"], "output")
        self._buf(LOGITS.buf, "bf16", [1, cfg.vocab], "output")
        used = set().union(*(used_buffers(p.ops) for p in programs))
        if PREDICTIONS.buf in used:
            self._buf(PREDICTIONS.buf, "i64", ["tokens"], "output")
        if CARRY.buf in used:
            self._buf(CARRY.buf, "bf16", ["tokens", cfg.hidden], "carry")
        self.programs = [p.name for p in programs]
        progs: dict[str, Any] = {}
        for i, prog in enumerate(programs):
            for b in prog.bufs.values():
                rows = prog.rows if isinstance(prog.rows, int) else "tokens"
                self._buf(b.name, b.dtype, b.shape or [rows, b.width], b.cls)
            disp = [self._emit(prog, op) for op in prog.ops]
            progs[prog.name] = {"dispatches": disp}
            for d in disp:
                self.dispatch_counts.setdefault(d["kernel"], [0] * len(programs))[i] += 1
        self._trigger_early(progs)
        # every pdl step's code was read by pdl(); pdl_order asks only for those
        problems = order_problems(progs, self.kernels, self.state_first,
                                  lambda f, s: self._facts[(f, s)])
        if problems:
            raise WiringError(problems[0], problems=problems)
        bufs = dict(sorted(self.buffers.items(), key=lambda kv: _buf_order(kv[0], kv[1])))
        return {
            "meta": {"version": 2, "model": self.label},
            "symbols": {"tokens": {"max": tokens_max}},
            "states": {n: {"bytes_per_token": b}
                       for n, b in {**self.kv.states(), **self.extra_states}.items()},
            "buffers": bufs,
            "kernels": self.kernels,
            "programs": progs,
        }

    def _trigger_early(self, progs: dict[str, Any]) -> None:
        """GEMV kernels that launch their early-trigger twin (same params and bits): those
        right before a step that reads before its wait (:func:`.pdl_order.early_triggers`)
        and decode's small, latency-bound ones (:func:`.pdl_order.small_early_triggers`)."""
        readers = early_triggers(progs, self.kernels, self.state_first,
                                 lambda f, s: self._facts[(f, s)], G.EARLY_TWINS)
        small = small_early_triggers(progs, self.kernels, G.EARLY_TWINS, G.WEIGHT_ROWS)
        why = {**{n: f"under {pdl_order.SMALL_EARLY_BYTES >> 20} MiB of weight, so the next "
                     f"kernel launches while it runs" for n in small},
               **{n: "the next step reads before its own" for n in readers}}
        for name, twin in sorted({**small, **readers}.items()):
            st = self.kernels[name]["impl"]["steps"][0]
            new = self.own_step(st["cubin"], twin, weights_first=True,
                                **{k: v for k, v in st.items()
                                   if k not in ("symbol", "cubin", "sha256", "pdl")})
            if not new.get("pdl"):
                raise WiringError(f"kernel `{name}`: `{twin}` ({st['cubin']}) does not wait "
                                  f"on the grid dependency before its first access")
            self.kernels[name] = {**self.kernels[name], "impl": {"steps": [new]}}
            self.sources[name] = self.sources[name].replace(
                f"`{st['symbol']}`", f"`{twin}` (dependents launched right after its wait: "
                f"{why[name]})")

    def _inputs(self) -> None:
        """The caller contract's inputs and their domains, which the runtime checks on every
        host write: positions below the mined cache writers' compiled bound L (0 <= slot < L,
        asserted by :mod:`.writers`) whatever the capacity; slots and page numbers below the
        capacity the caller loads (``index_into`` the first K state; pages of PAGE_TOKENS)."""
        kv = self.kv
        pool = kv.state(0, "k")
        F.table_covers(kv, kv.table_pages, PAGE_TOKENS, "buffers.block_table")
        self._buf(TOKEN_IDS.buf, "i64", ["tokens"], "input")
        self._buf(POSITIONS.buf, "i64", ["tokens"], "input")
        self._buf(SLOTS.buf, "i64", ["tokens"], "input")
        self._buf(POS0.buf, "i32", [1], "input")
        self._buf(KV_LENS.buf, "i32", ["tokens"], "input")
        self._buf(BLOCK_TABLE.buf, "i32", ["tokens", kv.table_pages], "input")
        bound = {"min": 0, "max": kv.max_len - 1}
        for b in (POSITIONS.buf, POS0.buf):
            self.buffers[b]["domain"] = dict(bound)
        self.buffers[SLOTS.buf]["domain"] = {"index_into": pool}
        self.buffers[KV_LENS.buf]["domain"] = {"min": 1, "max": kv.max_len}
        self.buffers[BLOCK_TABLE.buf]["domain"] = {"index_into": pool, "unit": PAGE_TOKENS}

    def _emit(self, prog: Program, op: Op) -> dict[str, Any]:
        emit = EMIT.get(op.kind)
        if emit is None:
            raise WiringError(f"internal: {prog.name}: op `{op.label}` of kind `{op.kind}` "
                              f"has no emitter (assemble.EMIT)")
        return emit(self, prog.name, op, prog.rows)


Emitter = Callable[[Assembler, str, Op, Any], dict[str, Any]]


def mined(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    """A captured kernel replayed byte for byte: its cubin, symbol, parameter layout (wired
    pointers, constant literals) and fitted grid; the interface has one argument per wired
    pointer and per fitted (``tokens``-dependent) scalar."""
    s = op.site
    assert s is not None
    if s.module is None:
        raise WiringError(f"{s.where(program, op.label)}: module unknown; cannot pin it")
    file = f"{s.module[:16]}.cubin"
    asm.cubins.setdefault(file, CubinSource(file, "mined", s.module, set())).symbols.add(
        s.name)
    iface: list[str] = []
    step_params: list[str] = []
    step_args: list[dict[str, Any]] = []
    disp: list[dict[str, Any]] = []
    for p, size in enumerate(s.sizes):
        if p in op.ptrs:
            d, ref = op.ptrs[p]
            if size != 8:
                raise WiringError(f"{s.where(program, op.label)}: pointer param {p} has "
                                  f"{size} bytes")
            t = f"{d} ptr" if ref.state else f"{d} buffer<{asm.dtype_of(ref)}>"
            step_params.append(t)
            step_args.append({"arg": len(iface)})
            iface.append(t)
            disp.append(asm.arg(ref))
            continue
        f = s.scalars.get(p)
        if f is None:
            raise WiringError(f"{s.where(program, op.label)}: param {p} is neither a "
                              f"wired pointer nor a scalar (unwired pointer?)")
        t = {4: "i32", 8: "i64", 1: "u8"}.get(size)
        if t is None:
            raise WiringError(f"{s.where(program, op.label)}: scalar param {p} has "
                              f"{size} bytes")
        step_params.append(t)
        if f.verdict == "constant":
            step_args.append({t: _plain(f.expr)})
        else:
            step_args.append({"arg": len(iface)})
            iface.append(t)
            e = _plain(f.expr)
            disp.append({"sym": "tokens"} if e == TOK else {"expr": e})
    grid = [_plain(s.fits[a].expr) for a in ("grid.x", "grid.y", "grid.z")]
    smem = s.fits.get("smem")
    pdl = asm.pdl(file, s.name, lambda: asm.facts.capture.module_bytes(s.module),
                  s.where(program, op.label))
    st = step(s.name, step_params, list(s.info.block), grid, step_args, cubin=file,
              sha256=s.module, shared_mem=_plain(smem.expr) if smem is not None else 0,
              pdl=pdl)
    name = asm.kernel(f"{program}.{_role(op.label)}.{s.module[:8]}",
                      {"params": iface, "impl": {"steps": [st]}},
                      f"mined `{s.name}` (module {s.module[:16]}…)")
    return {"label": op.label, "kernel": name, "args": disp}


EMIT: dict[str, Emitter] = {
    "mined": mined, "gemm": G.gemm, "gemm_acc": G.gemm_acc, "gemm_silu": G.gemm_silu,
    "gemm_split": G.gemm_split, "gemm_norm": G.gemm_norm, "gemm_rnorm": G.gemm_norm,
    "gemm_rnorm_silu": G.gemm_norm, "gemm_res": G.gemm_res,
    "norm_first": own_norm.norm, "norm_add": own_norm.norm,
    "embedding": own.embedding, "angles": own_rope.rope_angles,
    "rope_kv": own_rope.rope_kv, "rope_attention": AC.rope_attention,
    "attention": own.attention, "argmax": own.argmax, "markov": markov, "accept": accept,
}
"""Op kind -> its emitter: (assembler, program name, op, program rows) -> dispatch."""


def _role(label: str) -> str:
    parts = label.split(".")
    if parts[0].startswith("L") and parts[0][1:].isdigit():
        parts = parts[1:]
    return ".".join(parts)


def _buf_order(name: str, b: dict[str, Any]) -> tuple:
    cls = ["input", "output", "weight", "workspace", "carry"].index(b["class"])
    key = [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]
    return (cls, key)


def _plain(e: Any) -> Any:
    if isinstance(e, int):
        return e
    import msgspec
    return msgspec.to_builtins(e)
