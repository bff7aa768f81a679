"""RMSNorm into the next GEMV's prologue (``--fuse-norm``, the one-row ``decode`` program; an
option, off by default: measured slower, :data:`DEFAULT_FUSE_NORM`).

Why: a decode step is bound by launches (issue 16).  Every RMSNorm of the one-token graph is
a captured Inductor kernel that also does the residual adds (2 a layer + the final norm:
61 launches on SmolLM2, 73 on the Qwen3-4B shape), and its only reader is the GEMV right
after it.  The own ``kern_gemv_norm_bf16`` / ``kern_gemv_norm_silu_bf16`` (kernels/gemv.cu,
ABI.md 4e) take the residual add and the norm into that GEMV's prologue: one launch instead
of two.

The residual stream becomes kern's own: ``r_0`` is the embedding's output, ``r_t = r_{t-1} +
d_t`` with ``d_t`` the output of the GEMM right before norm ``t`` (the layer's ``o_proj`` or
``down_proj``), kept in two workspaces used in turn (:data:`RESIDUAL`: a fused GEMV reads
``r_{t-1}`` from one while its first block writes ``r_t`` into the other).  The arithmetic
is HF's (a bf16 add, then ``LlamaRMSNorm``), not the captured kernels' (which keep their
sums in f32 and recompute them from the pieces); the epsilon is the one the wiring asserted
in every captured norm (:func:`.falsify.eps_literal`).

Made only where it is proved on the IR (:class:`~.errors.WiringError` otherwise): the
program's norms are exactly the model's, in order (:meth:`.arch.Arch.norm_weights`); each is
a captured kernel with one weight pointer and one output, and the op right after it is a
GEMM (``gemm`` or ``gemm_silu``) whose A is that output; norm 0 reads only the embedding's
output; norm ``t > 0`` reads the output of the GEMM right before it, the layer's ``o_proj``
(a post-attention norm) or ``down_proj`` (the others); and no kept op reads anything a
dropped norm wrote before a kept op writes it anew (the captured residual sums and normed
rows vanish with them).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from .errors import WiringError
from .ir import Buf, Op, Program, Ref, check_dataflow, is_weight, op_where, reads, \
    used_buffers, writes

if TYPE_CHECKING:
    from .arch import Arch
    from .config import ModelConfig

RESIDUAL = ("{p}.residual.a", "{p}.residual.b")
"""The two residual workspaces of program ``p`` (bf16 ``[rows, hidden]``): ``r_t`` lives in
``RESIDUAL[t % 2]``."""
DEFAULT_FUSE_NORM = False
"""``kern-gen llama|qwen3 --fuse-norm`` default: off, because it measured slower.  H200,
``kern-run bench --lever`` in one run (docs/measurements.md, issue 16, session 20): Qwen3-4B
shape 2.972 ms/token fused vs 2.947 captured norms; SmolLM2 0.714 vs 0.700.  The 73 / 61
launches it saves cost less than the norm now on every GEMV block's critical path (the
GEMVs alone +0.18 ms on Qwen3); HF's bf16 residual also lands farther from fp32 than
Inductor's f32 sums (SmolLM2 median rel. error 0.0197 vs 0.0135; Qwen3 0.0359 vs 0.0274)."""
FUSED_KIND = {"gemm": "gemm_norm", "gemm_silu": "gemm_norm_silu"}
"""The GEMV a norm is taken into -> the fused op's kind."""
PROGRAMS = frozenset({"decode"})
"""The programs the pass applies to: one row (the kernels hold a block's rows of A in 16 KB
of shared memory) and no reader of the hidden states besides the GEMVs (DSpark's
``decode_spec`` taps them)."""


def fuse_norms(prog: Program, cfg: ModelConfig, arch: Arch) -> Program:
    """``prog`` with every RMSNorm taken into the GEMV after it (refused unless provable)."""
    ops = list(prog.ops)
    names = arch.norm_weights(cfg)
    at = [j for j, o in enumerate(ops) if _norm_weight(o) is not None]
    found = [_norm_weight(ops[j]) for j in at]
    if found != names:
        raise WiringError(f"{prog.name}: the norms to fuse are {_short(found)}, the model's "
                          f"are {_short(names)} (in call order)")
    res = [RESIDUAL[0].format(p=prog.name), RESIDUAL[1].format(p=prog.name)]
    fused: dict[int, Op] = {}
    prev = None
    for t, j in enumerate(at):
        fused[j] = _fuse_one(prog.name, ops, j, t, prev, Ref(buf=res[t % 2]), cfg)
        prev = Ref(buf=res[t % 2])
    _nothing_stale(prog.name, ops, set(at))
    out = [fused[j] if j in fused else o for j, o in enumerate(ops) if j - 1 not in fused]
    check_dataflow(prog.name, out)
    bufs = {**prog.bufs, **{n: Buf(n, "bf16", cfg.hidden, "workspace") for n in res}}
    used = used_buffers(out)
    return replace(prog, ops=out, bufs={k: b for k, b in bufs.items() if k in used})


def _norm_weight(o: Op) -> str | None:
    """The RMSNorm weight a captured kernel reads, if it is a norm (wired by ``wire_norm``:
    its label names the weight's module)."""
    if o.kind != "mined":
        return None
    ws = [r.buf for r in reads(o) if is_weight(r.buf)]
    if len(ws) == 1 and ws[0] is not None and ws[0].endswith("norm.weight") \
            and "self_attn" not in ws[0]:
        return ws[0]
    return None


def _short(names: list) -> str:
    return f"{len(names)} ({', '.join(map(str, names[:3]))}{', …' if len(names) > 3 else ''})"


def _fuse_one(program: str, ops: list[Op], j: int, t: int, prev: Ref | None, out: Ref,
              cfg: ModelConfig) -> Op:
    """Norm ``t`` at ``ops[j]`` and the GEMV after it as one op; ``prev`` holds ``r_{t-1}``
    (None for norm 0, whose residual is the embedding's output), ``out`` receives ``r_t``."""
    norm = ops[j]
    where = op_where(program, norm)
    # the normed row is the last pointer (wire_norm's rule); an earlier output is a residual
    # sum stored for later norms, which the stale check below proves nobody else reads
    last = max(norm.ptrs)
    direction, normed = norm.ptrs[last]
    if direction != "out":
        raise WiringError(f"{where}: its last pointer is `{direction}`, not the normed output")
    gemv = ops[j + 1] if j + 1 < len(ops) else None
    if gemv is None or gemv.kind not in FUSED_KIND or gemv.args["a"] != normed:
        raise WiringError(f"{where}: the op after it is not a GEMV of its output "
                          f"{normed.buf} ({gemv.label if gemv else 'none'})")
    if gemv.args["k"] != cfg.hidden:
        raise WiringError(f"{where}: `{gemv.label}` has k {gemv.args['k']}, the hidden size "
                          f"is {cfg.hidden}")
    acts = [r for r in reads(norm) if not is_weight(r.buf)]
    if t == 0:
        x, d = _first_residual(program, ops, j, acts, where), None
    else:
        x, d = prev, _delta(ops, j, t, acts, where)
    args = {"x": x, "d": d, "g": Ref(buf=_norm_weight(norm)), "xo": out,
            **{key: gemv.args[key] for key in ("w", "c", "n", "k")}, "eps": cfg.eps}
    if "rows" in gemv.args:
        args["rows"] = gemv.args["rows"]
    if d is None:
        del args["d"]
    label = f"{norm.label}+{gemv.label.rsplit('.', 1)[-1]}"
    return Op(FUSED_KIND[gemv.kind], label, gemv.site, args=args)


def _first_residual(program: str, ops: list[Op], j: int, acts: list[Ref], where: str) -> Ref:
    """Norm 0 reads exactly the embedding's output (``r_0``)."""
    emb = [o for o in ops[:j] if o.kind == "embedding"]
    if len(acts) != 1 or len(emb) != 1 or acts[0] != emb[0].args["out"]:
        raise WiringError(f"{where}: the first norm reads {[r.buf for r in acts]}, not "
                          f"exactly the embedding's output")
    return acts[0]


def _delta(ops: list[Op], j: int, t: int, acts: list[Ref], where: str) -> Ref:
    """Norm ``t > 0`` adds the output of the GEMM right before it: the layer's ``o_proj``
    before a post-attention norm (odd ``t``), ``down_proj`` before the others."""
    before = ops[j - 1]
    want = "o_proj" if t % 2 else "down_proj"
    if before.kind != "gemm" or not before.label.endswith(want):
        raise WiringError(f"{where}: the op before it is `{before.label}` ({before.kind}), "
                          f"not the layer's {want} GEMM whose output it adds")
    if before.args["c"] not in acts:
        raise WiringError(f"{where}: it does not read `{before.label}`'s output "
                          f"{before.args['c'].buf}")
    return before.args["c"]


def _nothing_stale(program: str, ops: list[Op], norms: set[int]) -> None:
    """No kept op reads a buffer whose last writer is a dropped norm (the GEMV right after a
    norm reads its normed row from its own prologue instead)."""
    stale: dict[str, str] = {}          # buffer -> the dropped norm that wrote it last
    for j, o in enumerate(ops):
        if j in norms:
            stale.update({r.buf: o.label for _, r in writes(o) if r.buf})
            continue
        skip = o.args.get("a") if j - 1 in norms else None
        for r in reads(o):
            if r.buf in stale and r != skip:
                raise WiringError(f"{op_where(program, o)}: reads `{r.buf}`, last written by "
                                  f"the norm `{stale[r.buf]}`, which --fuse-norm drops")
        for d, r in writes(o):
            if d == "out" and r.buf:
                stale.pop(r.buf, None)
