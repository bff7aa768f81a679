"""Ops -> manifest (dict), export plan and the list of cubins to write.

Contracts (docs/caller-contract.md): symbol ``tokens``; state ``kv``; inputs ``token_ids``
(i64 [tokens]), ``positions`` (i64 [tokens]), ``pos0`` (i32 [1]); outputs ``next_token``
(i64 [1]), ``logits`` (bf16 [1, vocab]) and ``predictions`` (i64 [tokens]); programs
``prefill`` (fills ``kv`` only), ``decode`` (tokens = 1) and ``verify`` (the prefill graph's
kernels over the whole forward, logits and greedy argmax for every row).  Weight buffers are named like the HF tensors, except the merged
projections ``self_attn.qkv_proj`` and ``mlp.gate_up_proj`` (rows concatenated, export plan
``concat``; :mod:`.merge`); ``model.rotary_emb.inv_freq`` is a derived weight (export plan
``rope_inv_freq``).

KV state: ``bytes_fixed`` and the attention kernels' strides come from the one
:class:`.kv.KVLayout` the wiring binds the cache writers with.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from .config import ModelConfig
from .errors import WiringError
from .facts import Facts
from .kv import KVLayout
from .ir import (KV, LOGITS, NEXT_TOKEN, POS0, POSITIONS, PREDICTIONS, TOK, TOKEN_IDS, Op,
                 Program, Ref, is_weight)

ARGMAX_PARTS = 64
PROGRAMS = ("prefill", "decode", "verify")
INV_FREQ = "model.rotary_emb.inv_freq"


@dataclass
class CubinSource:
    file: str
    origin: str            # "mined" | "own"
    module: str | None     # capture module sha256 (mined)
    symbols: set[str]


class Assembler:
    def __init__(self, facts: Facts, cfg: ModelConfig, kv: KVLayout, own_sha: dict[str, str],
                 label: str, merged: dict[str, list[tuple[str, int]]] | None = None) -> None:
        self.facts, self.cfg, self.kv = facts, cfg, kv
        self.merged = merged or {}      # merged weight -> [(part, first row)]
        self.own_sha = own_sha
        self.kernels: dict[str, dict[str, Any]] = {}
        self._kernel_keys: dict[str, str] = {}
        self.buffers: dict[str, dict[str, Any]] = {}
        self.cubins: dict[str, CubinSource] = {}
        self.sources: dict[str, str] = {}        # kernel name -> source line for the report
        self.label = label
        self.dispatch_counts: dict[str, list[int]] = {}

    # --- buffers --------------------------------------------------------------------------
    def _buf(self, name: str, dtype: str, shape: list, cls: str) -> None:
        self.buffers.setdefault(name, {"dtype": dtype, "shape": shape, "class": cls})

    def _arg(self, ref: Ref) -> dict[str, Any]:
        if ref.state:
            return ({"state": ref.state, "offset": ref.offset} if ref.offset
                    else {"state": ref.state})
        if is_weight(ref.buf):
            self._weight(ref.buf)
        return {"buf": ref.buf, "offset": ref.offset} if ref.offset else {"buf": ref.buf}

    def _weight(self, name: str) -> None:
        if name in self.merged:
            parts = [self.facts.weights[p] for p, _ in self.merged[name]]
            if len({(t.dtype, tuple(t.shape[1:])) for t in parts}) != 1 or parts[0].dtype != "bfloat16":
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

    # --- kernels --------------------------------------------------------------------------
    def _kernel(self, base: str, body: dict[str, Any], source: str) -> str:
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

    def _own_step(self, file: str, symbol: str, **step: Any) -> dict[str, Any]:
        self.cubins.setdefault(file, CubinSource(file, "own", None, set())).symbols.add(symbol)
        return {"symbol": symbol, "cubin": file, "sha256": self.own_sha[file], **step}

    def mined(self, program: str, op: Op) -> dict[str, Any]:
        s = op.site
        assert s is not None
        if s.module is None:
            raise WiringError(f"{s.where(program, op.label)}: module unknown; cannot pin it")
        file = f"{s.module[:16]}.cubin"
        self.cubins.setdefault(file, CubinSource(file, "mined", s.module, set())).symbols.add(
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
                if ref.state:
                    t = f"{d} ptr"
                else:
                    dt = self._dtype_of(ref)
                    t = f"{d} buffer<{dt}>"
                step_params.append(t)
                step_args.append({"arg": len(iface)})
                iface.append(t)
                disp.append(self._arg(ref))
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
        step: dict[str, Any] = {"symbol": s.name, "cubin": file, "sha256": s.module,
                                "params": step_params, "block": list(s.info.block),
                                "grid": grid}
        smem = s.fits.get("smem")
        if smem is not None and _plain(smem.expr) != 0:
            step["shared_mem"] = _plain(smem.expr)
        step["args"] = step_args
        name = self._kernel(f"{program}.{_role(op.label)}.{s.module[:8]}",
                            {"params": iface, "impl": {"steps": [step]}},
                            f"mined `{s.name}` (module {s.module[:16]}…)")
        return {"label": op.label, "kernel": name, "args": disp}

    def _dtype_of(self, ref: Ref) -> str:
        if ref.buf in self.buffers:
            return self.buffers[ref.buf]["dtype"]
        if ref.buf == POSITIONS.buf:
            return "i64"
        if ref.buf == INV_FREQ:
            return "f32"
        if is_weight(ref.buf):
            return "bf16"
        raise WiringError(f"internal: buffer `{ref.buf}` not declared")

    def gemm(self, program: str, op: Op, rows: Any) -> dict[str, Any]:
        t = "extern:cublaslt_bf16_tn"
        p = ["in buffer<bf16>", "in buffer<bf16>", "out buffer<bf16>", "i32", "i32", "i32"]
        name = self._kernel("gemm", {"params": p, "impl": {"steps": [{
            "symbol": t, "params": p, "block": [1, 1, 1], "grid": [1, 1, 1],
            "args": [{"arg": i} for i in range(6)]}]}}, "extern cuBLASLt (`extern:cublaslt_bf16_tn`)")
        a = op.args
        m = {"sym": "tokens"} if rows == TOK else {"i32": rows}
        return {"label": op.label, "kernel": name,
                "args": [self._arg(a["a"]), self._arg(a["w"]), self._arg(a["c"]), m,
                         {"i32": a["n"]}, {"i32": a["k"]}]}

    def embedding(self, program: str, op: Op, rows: Any) -> dict[str, Any]:
        cfg = self.cfg
        p = ["in buffer<i64>", "in buffer<bf16>", "out buffer<bf16>"]
        step = self._own_step("embedding.cubin", "kern_embedding_bf16",
                              params=[*p, "i32", "i32"], block=[256, 1, 1], grid=[rows, 1, 1],
                              args=[{"arg": 0}, {"arg": 1}, {"arg": 2}, {"i32": cfg.hidden},
                                    {"i32": cfg.vocab}])
        name = self._kernel(f"{program}.embedding", {"params": p, "impl": {"steps": [step]}},
                            "own `kern_embedding_bf16`")
        return {"label": op.label, "kernel": name,
                "args": [self._arg(TOKEN_IDS), self._arg(Ref(buf="model.embed_tokens.weight")),
                         self._arg(op.args["out"])]}

    def rope_angles(self, program: str, op: Op, rows: Any) -> dict[str, Any]:
        p = ["in buffer<i64>", "in buffer<f32>", "out buffer<f32>", "i32"]
        step = self._own_step("rope_angles.cubin", "kern_rope_angles_f32",
                              params=[*p, "i32"], block=[128, 1, 1], grid=[rows, 1, 1],
                              args=[{"arg": 0}, {"arg": 1}, {"arg": 2}, {"arg": 3},
                                    {"i32": self.cfg.head_dim // 2}])
        name = self._kernel("rope_angles", {"params": p, "impl": {"steps": [step]}},
                            "own `kern_rope_angles_f32` (replaces the captured cutlass sgemm "
                            "`inv_freq x positions`, which takes a by-value struct)")
        t = {"sym": "tokens"} if rows == TOK else {"i32": rows}
        return {"label": op.label, "kernel": name,
                "args": [self._arg(POSITIONS), self._arg(Ref(buf=INV_FREQ)),
                         self._arg(op.args["out"]), t]}

    def attention(self, program: str, op: Op, rows: Any) -> dict[str, Any]:
        """``prefill``: the own flash kernel (query tiles of 64 rows).  ``decode`` and
        ``verify``: the own split-KV kernel, one grid z-slice per query row (row t sees keys
        ``0 .. pos0 + t``): ``verify`` has few rows (k + 1 <= 16 by the caller contract), for
        which a 64-row query tile would idle and a split over the keys keeps the SMs busy."""
        cfg = self.cfg
        D, H, KVH = cfg.head_dim, cfg.heads, cfg.kv_heads
        if D not in (64, 128):
            raise WiringError(f"own attention has head_dim 64 or 128; the model has {D}")
        kv = self.kv           # K then V: slot, head strides (elements)
        strides = [{"i64": kv.slot_stride}, {"i64": kv.head_stride}, {"i64": kv.slot_stride},
                   {"i64": kv.head_stride}]
        scale = {"f32": 1.0 / math.sqrt(D)}
        a = op.args
        if program != "prefill":
            S = decode_splits(KVH)
            r = "tokens" if rows == TOK else rows
            iface = ["in buffer<bf16>", "in ptr", "in ptr", "in buffer<i32>", "out buffer<bf16>"]
            body = {"params": iface, "impl": {
                "scratch": {"part_ml": {"dtype": "f32", "shape": [r, H, S, 2]},
                            "part_acc": {"dtype": "f32", "shape": [r, H, S, D]}},
                "steps": [
                    self._own_step("attn_decode.cubin", f"kern_attn_decode_partial_bf16_d{D}",
                                   params=["in buffer<bf16>", "in ptr", "in ptr",
                                           "in buffer<i32>", "out buffer<f32>", "out buffer<f32>",
                                           "i32", "i64", "i64", "i64", "i64", "i32", "i32",
                                           "f32"],
                                   block=[128, 1, 1], grid=[KVH, S, rows],
                                   args=[{"arg": 0}, {"arg": 1}, {"arg": 2}, {"arg": 3},
                                         {"scratch": "part_ml"}, {"scratch": "part_acc"},
                                         {"i32": cfg.q_width}, *strides, {"i32": H},
                                         {"i32": KVH}, scale]),
                    self._own_step("attn_decode.cubin", f"kern_attn_decode_reduce_bf16_d{D}",
                                   params=["in buffer<f32>", "in buffer<f32>",
                                           "out buffer<bf16>", "i32", "i32"],
                                   block=[D, 1, 1], grid=[H, rows, 1],
                                   args=[{"scratch": "part_ml"}, {"scratch": "part_acc"},
                                         {"arg": 4}, {"i32": H}, {"i32": S}])]}}
            name = self._kernel(f"{program}.attention", body,
                                f"own split-KV decode attention (S = {S})")
            extra: list[dict[str, Any]] = []
        else:
            iface = ["in buffer<bf16>", "in ptr", "in ptr", "in buffer<i32>", "out buffer<bf16>",
                     "i32"]
            body = {"params": iface, "impl": {"steps": [
                self._own_step("attn_prefill.cubin", f"kern_attn_prefill_bf16_d{D}",
                               params=["in buffer<bf16>", "in ptr", "in ptr", "in buffer<i32>",
                                       "out buffer<bf16>", "i32", "i64", "i64", "i64", "i64",
                                       "i32", "i32", "i32", "f32"],
                               block=[128, 1, 1], grid=[{"ceil_div": [TOK, 64]}, H, 1],
                               shared_mem=81920 if D == 128 else 40960,
                               args=[{"arg": 0}, {"arg": 1}, {"arg": 2}, {"arg": 3}, {"arg": 4},
                                     {"i32": cfg.q_width}, *strides, {"i32": H}, {"i32": KVH},
                                     {"arg": 5}, scale])]}}
            name = self._kernel("prefill.attention", body, "own flash prefill attention")
            extra = [{"sym": "tokens"}]
        return {"label": op.label, "kernel": name,
                "args": [self._arg(a["q"]), self._arg(a["k"]), self._arg(a["v"]),
                         self._arg(POS0), self._arg(a["out"]), *extra]}

    def argmax(self, program: str, op: Op, rows: Any) -> dict[str, Any]:
        """Greedy argmax of each of ``rows`` logit rows (grid x = row)."""
        P, V = ARGMAX_PARTS, self.cfg.vocab
        r = "tokens" if rows == TOK else rows
        body = {"params": ["in buffer<bf16>", "out buffer<i64>"], "impl": {
            "scratch": {"part_val": {"dtype": "f32", "shape": [r, P]},
                        "part_idx": {"dtype": "i32", "shape": [r, P]}},
            "steps": [
                self._own_step("argmax.cubin", "kern_argmax_bf16_partial",
                               params=["in buffer<bf16>", "out buffer<f32>", "out buffer<i32>",
                                       "i32"], block=[256, 1, 1], grid=[rows, P, 1],
                               args=[{"arg": 0}, {"scratch": "part_val"},
                                     {"scratch": "part_idx"}, {"i32": V}]),
                self._own_step("argmax.cubin", "kern_argmax_bf16_reduce",
                               params=["in buffer<f32>", "in buffer<i32>", "out buffer<i64>",
                                       "i32"], block=[32, 1, 1], grid=[rows, 1, 1],
                               args=[{"scratch": "part_val"}, {"scratch": "part_idx"},
                                     {"arg": 1}, {"i32": P}])]}}
        name = self._kernel("argmax" if rows == 1 else f"{program}.argmax", body,
                            "own two-stage argmax")
        return {"label": "argmax", "kernel": name,
                "args": [self._arg(op.args["logits"]), self._arg(op.args["out"])]}

    # --- whole manifest -------------------------------------------------------------------
    def manifest(self, programs: list[Program], tokens_max: int) -> dict[str, Any]:
        cfg = self.cfg
        self._buf(TOKEN_IDS.buf, "i64", ["tokens"], "input")
        self._buf(POSITIONS.buf, "i64", ["tokens"], "input")
        self._buf(POS0.buf, "i32", [1], "input")
        self._buf(NEXT_TOKEN.buf, "i64", [1], "output")
        self._buf(LOGITS.buf, "bf16", [1, cfg.vocab], "output")
        if any(p.name == "verify" for p in programs):
            self._buf(PREDICTIONS.buf, "i64", ["tokens"], "output")
        progs: dict[str, Any] = {}
        for prog in programs:
            for b in prog.bufs.values():
                rows = prog.rows if isinstance(prog.rows, int) else "tokens"
                self._buf(b.name, b.dtype, [rows, b.width], b.cls)
            disp = []
            for op in prog.ops:
                if op.kind == "mined":
                    disp.append(self.mined(prog.name, op))
                elif op.kind == "gemm":
                    disp.append(self.gemm(prog.name, op, prog.rows))
                elif op.kind == "embedding":
                    disp.append(self.embedding(prog.name, op, prog.rows))
                elif op.kind == "angles":
                    disp.append(self.rope_angles(prog.name, op, prog.rows))
                elif op.kind == "attention":
                    disp.append(self.attention(prog.name, op, prog.rows))
                elif op.kind == "argmax":
                    disp.append(self.argmax(prog.name, op, prog.rows))
            progs[prog.name] = {"dispatches": disp}
            for d in disp:
                c = self.dispatch_counts.setdefault(d["kernel"], [0, 0, 0])
                c[PROGRAMS.index(prog.name)] += 1
        bufs = dict(sorted(self.buffers.items(), key=lambda kv: _buf_order(kv[0], kv[1])))
        return {
            "meta": {"version": 2, "model": self.label},
            "symbols": {"tokens": {"max": tokens_max}},
            "states": {KV: {"bytes_fixed": self.kv.total_bytes}},
            "buffers": bufs,
            "kernels": self.kernels,
            "programs": {k: progs[k] for k in PROGRAMS if k in progs},
        }


def decode_splits(kv_heads: int) -> int:
    """Key splits S of the own decode attention: the power of two nearest 128 / kv_heads
    blocks per kv head (grid kv_heads x S, about one block per SM of the H200's 132).

    Measured on the H200 (2026-11-30, packages/kern-gen/kernels/bench.py, median µs per
    call): time grows with S at every context up to 4096 (more blocks and a longer merge)
    while a small S loses parallelism only at long contexts; 32q/8kv d128: S = 16 / 32 / 48
    -> 7.4 / 10.4 / 13.6 µs at ctx 512, 17.0 / 17.1 / 19.4 at ctx 4096; 9q/3kv d64: S = 32 /
    64 / 128 -> 8.5 / 12.9 / 21.9 at ctx 512, 9.8 / 14.4 / 22.0 at ctx 4096. The earlier
    rule (~3 blocks per SM: 48 and 128) cost 6 and 13 µs per layer."""
    target = max(1.0, 128 / kv_heads)
    return 1 << max(0, round(math.log2(target)))


def _role(label: str) -> str:
    parts = label.split(".")
    if parts[0].startswith("L") and parts[0][1:].isdigit():
        parts = parts[1:]
    return ".".join(parts)


def _buf_order(name: str, b: dict[str, Any]) -> tuple:
    cls = ["input", "output", "weight", "workspace", "carry"].index(b["class"])
    import re
    key = [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]
    return (cls, key)


def _plain(e: Any) -> Any:
    if isinstance(e, int):
        return e
    import msgspec
    return msgspec.to_builtins(e)
