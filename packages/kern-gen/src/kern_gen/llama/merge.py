"""Merged projections: one GEMM for a layer's q/k/v and one for its gate/up, in ``decode``.

Why: a one-token decode step is bound by launches and per-GEMM latency, not by FLOPs; the
captured graph (transformers' separate ``q_proj``/``k_proj``/``v_proj`` and
``gate_proj``/``up_proj`` modules) has 7 GEMMs per layer, merged it has 4 (the GEMM set
``../shared/facts/h200.md`` and kern-runtime's benchmark time). The GEMMs are the runtime's
cuBLASLt externs, not mined kernels, so merging changes no captured fact.

Weights: one buffer per merged projection, rows concatenated in order
(``model.layers.{i}.self_attn.qkv_proj.weight`` = [q; k; v] rows, ``mlp.gate_up_proj`` =
[gate; up]), made by the export plan's ``concat``. ``decode`` multiplies by the whole buffer
and writes one ``[1, n_q + n_k + n_v]`` row; every later reader of a part's captured output
reads the merged row at that part's byte offset (exactly: from the part's captured GEMM on,
until another kernel overwrites that captured buffer with new data, as Inductor reuses
addresses). ``prefill`` keeps one GEMM per part (a merged ``[tokens, n]`` output would give
the mined readers a row stride they were not compiled for) and reads each part's weight as a
view: the merged buffer at the part's first row (row-major: the part's rows are contiguous).

The captured readers are Triton kernels compiled for 16-byte-aligned pointers, so every part
offset must be a multiple of 16 bytes; the merge refuses otherwise.
"""

from __future__ import annotations

from dataclasses import replace

from .config import ModelConfig
from .errors import WiringError
from .ir import Buf, Op, Program, Ref, check_dataflow, reads, used_buffers, writes

#: (merged weight, its parts) per layer, in row order.
MERGES = (("self_attn.qkv_proj", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
          ("mlp.gate_up_proj", ("mlp.gate_proj", "mlp.up_proj")))
ALIGN = 16


def merged_weights(cfg: ModelConfig) -> dict[str, list[tuple[str, int]]]:
    """Merged weight name -> [(part weight name, first row)], every layer."""
    out: dict[str, list[tuple[str, int]]] = {}
    for i in range(cfg.layers):
        for merged, parts in MERGES:
            rows, row = [], 0
            for p in parts:
                rows.append((f"model.layers.{i}.{p}.weight", row))
                row += _rows(cfg, p)
            out[f"model.layers.{i}.{merged}.weight"] = rows
    return out


def plan_entries() -> dict[str, dict[str, list[str]]]:
    """The export plan's ``concat`` entries for the merged weights (``{i}`` = the layer)."""
    return {f"model.layers.{{i}}.{m}.weight": {"concat": [f"model.layers.{{i}}.{p}.weight"
                                                         for p in parts]}
            for m, parts in MERGES}


def _rows(cfg: ModelConfig, part: str) -> int:
    return {"self_attn.q_proj": cfg.q_width, "self_attn.k_proj": cfg.kv_width,
            "self_attn.v_proj": cfg.kv_width, "mlp.gate_proj": cfg.intermediate,
            "mlp.up_proj": cfg.intermediate}[part]


def _part_of(cfg: ModelConfig) -> dict[str, tuple[str, int]]:
    """Part weight name -> (merged weight name, first row)."""
    return {p: (m, row) for m, parts in merged_weights(cfg).items() for p, row in parts}


def merge_projections(prog: Program, cfg: ModelConfig) -> Program:
    """One-token programs (``decode``) merge their part GEMMs; dynamic ones (``prefill``,
    ``verify``) read weight views: their mined readers need ``[tokens, n]`` rows of their own."""
    return merge_gemms(prog, cfg) if prog.rows == 1 else view_weights(prog, cfg)


def view_weights(prog: Program, cfg: ModelConfig) -> Program:
    """``prefill``: each part GEMM reads its weight as a view into the merged buffer."""
    part_of = _part_of(cfg)
    ops = []
    for op in prog.ops:
        w = op.args.get("w") if op.kind == "gemm" else None
        if w is not None and w.buf in part_of:
            m, row = part_of[w.buf]
            op = replace(op, args={**op.args, "w": Ref(buf=m, offset=row * op.args["k"] * 2)})
        ops.append(op)
    return replace(prog, ops=ops)


def merge_gemms(prog: Program, cfg: ModelConfig) -> Program:
    """``decode``: each layer's part GEMMs -> one GEMM at the first part's place, its readers
    re-pointed into the merged output (see the module docstring)."""
    ops = list(prog.ops)
    bufs = dict(prog.bufs)
    for i in range(cfg.layers):
        for merged, parts in MERGES:
            ops = _merge_one(prog.name, ops, bufs, cfg, i, merged, parts)
    used = used_buffers(ops)
    out = replace(prog, ops=ops, bufs={k: b for k, b in bufs.items() if k in used})
    check_dataflow(prog.name, out.ops)
    return out


def _merge_one(program: str, ops: list[Op], bufs: dict[str, Buf], cfg: ModelConfig,
               layer: int, merged: str, parts: tuple[str, ...]) -> list[Op]:
    labels = [f"L{layer}.{p}" for p in parts]
    where = f"{program}: layer {layer} {merged}"
    pos = []
    for lab in labels:
        hit = [j for j, o in enumerate(ops) if o.kind == "gemm" and o.label == lab]
        if len(hit) != 1:
            raise WiringError(f"{where}: {len(hit)} GEMMs labelled `{lab}`; expected one")
        pos.append(hit[0])
    if pos != sorted(pos):
        raise WiringError(f"{where}: the part GEMMs are not in row order ({labels})")
    gemms = [ops[j] for j in pos]
    a = gemms[0].args["a"]
    k = gemms[0].args["k"]
    if any(g.args["a"] != a or g.args["k"] != k for g in gemms):
        raise WiringError(f"{where}: the part GEMMs do not share their input A and k")
    for j in range(pos[0] + 1, pos[-1]):
        if a.buf in [r.buf for d, r in writes(ops[j])]:
            raise WiringError(f"{where}: `{ops[j].label}` overwrites the shared input "
                              f"`{a.buf}` between the part GEMMs")
    offsets, n = [], 0
    for g in gemms:
        offsets.append(2 * n)
        n += g.args["n"]
    if any(off % ALIGN for off in offsets):
        raise WiringError(f"{where}: part byte offsets {offsets} are not all multiples of "
                          f"{ALIGN} (the captured Triton readers assume aligned pointers)")
    name = f"{program}.L{layer}.{merged.split('.')[-1]}.out"
    bufs[name] = Buf(name, "bf16", n, "workspace")
    c = Ref(buf=name)
    fused = Op("gemm", f"L{layer}.{merged}", gemms[0].site,
               args={"a": a, "w": Ref(buf=f"model.layers.{layer}.{merged}.weight"), "c": c,
                     "n": n, "k": k})
    # readers of each part's captured output, from that part's GEMM on, read the merged row
    redirect: dict[int, dict[str, Ref]] = {}
    for g, j, off in zip(gemms, pos, offsets):
        old = g.args["c"].buf
        for t in range(j + 1, len(ops)):
            if old in [r.buf for d, r in writes(ops[t]) if d == "out"]:
                # overwritten with new data (Inductor reused the address): this kernel and
                # later readers see that data, not the part
                if old in [r.buf for r in reads(ops[t])]:
                    raise WiringError(f"{where}: `{ops[t].label}` reads and overwrites "
                                      f"`{old}`; cannot tell which to re-point")
                break
            redirect.setdefault(t, {})[old] = Ref(buf=name, offset=off)
    out = []
    for t, o in enumerate(ops):
        if t == pos[0]:
            out.append(fused)
        elif t in pos:
            continue
        else:
            out.append(_repoint(o, redirect.get(t, {})))
    return out


def _repoint(o: Op, to: dict[str, Ref]) -> Op:
    if not to:
        return o

    def new(r: Ref) -> Ref:
        m = to.get(r.buf) if r.buf else None
        return r if m is None else Ref(buf=m.buf, offset=m.offset + r.offset)
    return replace(o, ptrs={p: (d, new(r)) for p, (d, r) in o.ptrs.items()},
                   args={k: new(v) if isinstance(v, Ref) else v for k, v in o.args.items()})
