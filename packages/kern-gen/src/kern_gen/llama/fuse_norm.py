"""RMSNorm into the GEMVs around it (``--fuse-norm``, the one-row ``decode`` program; an
option, off by default: not faster, :data:`DEFAULT_FUSE_NORM`).

Why: a decode step is bound by launches and by each kernel's chain of dependent loads
(issue 16).  Every RMSNorm of the one-token graph is a captured Inductor kernel that also
does the residual adds (2 a layer + the final norm: 61 launches on SmolLM2, 73 on the
Qwen3-4B shape), between the GEMM whose output it adds and the GEMV that reads its output.
The norm is split between those two own kernels (kernels/gemv_norm.cu, ABI.md 4e), so that
neither gains a barrier-bound reduction on its critical path:

- the GEMM before norm ``t > 0`` (the layer's ``o_proj`` or ``down_proj``) becomes
  ``kern_gemv_res_bf16``: it adds its bf16 output to kern's own f32 residual stream
  (:data:`RESIDUAL`, in place) and writes each 16-column block's sum of squares
  (:data:`PARTS`); its output buffer is no longer written;
- the GEMV after norm ``t`` becomes ``kern_gemv_rnorm_bf16`` (``_silu`` for gate/up): its
  prologue adds the partial sums and normalises the residual row into shared memory;
- norm 0 (the embedding's output is the residual) and the GEMV after it become
  ``kern_gemv_norm_bf16``, which sums the squares itself and starts the f32 stream.

The arithmetic is the captured kernels' (their Triton source, inductor log): the residual
is summed in f32 from the bf16 pieces, ``A = bf16(w · (r · rsqrt(Σr²/k + eps)))`` with one
rounding; the epsilon is the one the wiring asserted in every captured norm
(:func:`.falsify.eps_literal`).  Only the order of the f32 additions differs.

Made only where it is proved on the IR (:class:`~.errors.WiringError` otherwise): the
program's norms are exactly the model's, in order (:meth:`.arch.Arch.norm_weights`); each is
a captured kernel whose last pointer is its output, and the op right after it is a GEMM
(``gemm`` or ``gemm_silu``) whose A is that output; norm 0 reads only the embedding's
output; norm ``t > 0`` reads the output of the GEMM right before it, the layer's ``o_proj``
(a post-attention norm) or ``down_proj`` (the others), of width hidden; and no kept op reads
anything a dropped norm wrote, or a replaced GEMM's output, before a kept op writes it anew.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from .errors import WiringError
from .gemm import GEMV_COLS
from .ir import Buf, Op, Program, Ref, check_dataflow, is_weight, op_where, reads, \
    used_buffers, writes

if TYPE_CHECKING:
    from .arch import Arch
    from .config import ModelConfig

RESIDUAL = "{p}.residual"
"""Program ``p``'s f32 residual stream ``[rows, hidden]``, updated in place."""
PARTS = "{p}.residual.parts"
"""Its sums of squares, f32 ``[rows, ceil(hidden / 16)]``: one per block of the last
``kern_gemv_res_bf16``."""
DEFAULT_FUSE_NORM = False
"""``kern-gen llama|qwen3 --fuse-norm`` default: off, because it is not faster.  H100,
``kern-run bench --lever`` in one run (docs/measurements.md, issue 16, session 20): Qwen3-4B
shape 3.644 ms/token against 3.641 with the captured norms; the GEMVs alone 3.270 against
3.109 ms.  Under PDL the captured norms run while the next GEMV streams its weights, so the
73 launches saved cost about what they cost.  (An earlier form that did the whole norm in the
next GEMV's prologue was slower on the H200: 2.972 vs 2.947, SmolLM2 0.714 vs 0.700.)  More
accurate though: Qwen3 teacher-forced median error vs fp32 0.0258 (c9) against 0.0274 for the
captured norms (session 7's figure, not rerun in session 20).  Re-measured on the H200 in
session 26 (same process, PDL on): SmolLM2 0.528 vs 0.518, Qwen3-4B shape 3.032 vs 2.635
(GEMVs alone 2.808 vs 2.209)."""
FUSED_KIND = {"gemm": "gemm_rnorm", "gemm_silu": "gemm_rnorm_silu"}
"""The GEMV after norm ``t > 0`` -> the fused op's kind (norm 0: ``gemm_norm``)."""
PROGRAMS = frozenset({"decode"})
"""The programs the pass applies to: one row (the kernels hold a block's rows of A in 16 KB
of shared memory) and no reader of the hidden states besides the GEMVs (DSpark's
``decode_spec`` taps them)."""


def fuse_norms(prog: Program, cfg: ModelConfig, arch: Arch) -> Program:
    """``prog`` with every RMSNorm split into the GEMVs around it (refused unless provable)."""
    ops = list(prog.ops)
    at = norm_sites(prog, cfg, arch)
    res, parts = Ref(buf=RESIDUAL.format(p=prog.name)), Ref(buf=PARTS.format(p=prog.name))
    p = -(-cfg.hidden // GEMV_COLS)
    new: dict[int, Op] = {}
    for t, j in enumerate(at):
        norm, gemv = ops[j], gemv_after(prog.name, ops, j, cfg)
        g = Ref(buf=norm_weight(norm))
        common = {key: gemv.args[key] for key in ("w", "c", "n", "k") + (
            ("rows",) if "rows" in gemv.args else ())}
        label = f"{norm.label}+{gemv.label.rsplit('.', 1)[-1]}"
        acts = [r for r in reads(norm) if not is_weight(r.buf)]
        if t == 0:
            x = first_residual(prog.name, ops, j, acts, op_where(prog.name, norm))
            if gemv.kind != "gemm":
                raise WiringError(f"{op_where(prog.name, norm)}: the first norm feeds "
                                  f"`{gemv.label}` ({gemv.kind}), not a plain GEMV")
            new[j + 1] = Op("gemm_norm", label, gemv.site,
                            args={"x": x, "g": g, "xo": res, **common, "eps": cfg.eps})
            continue
        before = producer(ops, j, t, acts, op_where(prog.name, norm), cfg)
        new[j - 1] = Op("gemm_res", before.label, before.site,
                        args={"a": before.args["a"], "w": before.args["w"], "res": res,
                              "parts": parts, "n": before.args["n"], "k": before.args["k"]})
        new[j + 1] = Op(FUSED_KIND[gemv.kind], label, gemv.site,
                        args={"r": res, "ss": parts, "g": g, **common, "p": p,
                              "eps": cfg.eps})
    nothing_stale(prog.name, ops, set(at), {j - 1 for j in at[1:]}, "--fuse-norm")
    out = [new.get(j, o) for j, o in enumerate(ops) if j not in set(at)]
    return rewritten(prog, out, [Buf(res.buf, "f32", cfg.hidden, "workspace"),
                                 Buf(parts.buf, "f32", p, "workspace")])


def rewritten(prog: Program, ops: list[Op], workspaces: list[Buf]) -> Program:
    """``prog`` with the norm pass's ``ops`` (data flow checked) and its buffers plus
    ``workspaces``, less those no op uses any more."""
    check_dataflow(prog.name, ops)
    bufs = {**prog.bufs, **{b.name: b for b in workspaces}}
    used = used_buffers(ops)
    return replace(prog, ops=ops, bufs={k: b for k, b in bufs.items() if k in used})


def norm_sites(prog: Program, cfg: ModelConfig, arch: Arch) -> list[int]:
    """The indices of ``prog``'s RMSNorm ops, proved to be exactly the model's norms in call
    order (:meth:`.arch.Arch.norm_weights`)."""
    names = arch.norm_weights(cfg)
    at = [j for j, o in enumerate(prog.ops) if norm_weight(o) is not None]
    found = [norm_weight(prog.ops[j]) for j in at]
    if found != names:
        raise WiringError(f"{prog.name}: the norms to replace are {_short(found)}, the "
                          f"model's are {_short(names)} (in call order)")
    return at


def norm_weight(o: Op) -> str | None:
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


def gemv_after(program: str, ops: list[Op], j: int, cfg: ModelConfig) -> Op:
    """The GEMV right after the norm at ``ops[j]``, reading its normed output (the last
    pointer, wire_norm's rule; an earlier output is a residual sum stored for later norms,
    which the stale check proves nobody else reads)."""
    norm = ops[j]
    where = op_where(program, norm)
    direction, normed = norm.ptrs[max(norm.ptrs)]
    if direction != "out":
        raise WiringError(f"{where}: its last pointer is `{direction}`, not the normed output")
    gemv = ops[j + 1] if j + 1 < len(ops) else None
    if gemv is None or gemv.kind not in FUSED_KIND or gemv.args["a"] != normed:
        raise WiringError(f"{where}: the op after it is not a GEMV of its output "
                          f"{normed.buf} ({gemv.label if gemv else 'none'})")
    if gemv.args["k"] != cfg.hidden:
        raise WiringError(f"{where}: `{gemv.label}` has k {gemv.args['k']}, the hidden size "
                          f"is {cfg.hidden}")
    return gemv


def first_residual(program: str, ops: list[Op], j: int, acts: list[Ref], where: str) -> Ref:
    """Norm 0 reads exactly the embedding's output (``r_0``)."""
    emb = [o for o in ops[:j] if o.kind == "embedding"]
    if len(acts) != 1 or len(emb) != 1 or acts[0] != emb[0].args["out"]:
        raise WiringError(f"{where}: the first norm reads {[r.buf for r in acts]}, not "
                          f"exactly the embedding's output")
    return acts[0]


def producer(ops: list[Op], j: int, t: int, acts: list[Ref], where: str,
              cfg: ModelConfig) -> Op:
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
    if before.args["n"] != cfg.hidden or "rows" in before.args:
        raise WiringError(f"{where}: `{before.label}` writes {before.args['n']} columns, the "
                          f"hidden size is {cfg.hidden}")
    return before


def nothing_stale(program: str, ops: list[Op], norms: set[int], producers: set[int],
                  option: str) -> None:
    """No kept op reads a buffer whose last writer is a dropped norm or a GEMM whose output
    the fusion no longer writes (the GEMV right after a norm reads its normed row from its
    own prologue instead)."""
    stale: dict[str, str] = {}          # buffer -> who last wrote it and is gone
    for j, o in enumerate(ops):
        if j in norms:
            stale.update({r.buf: f"the norm `{o.label}`" for _, r in writes(o) if r.buf})
            continue
        skip = o.args.get("a") if j - 1 in norms else None
        for r in reads(o):
            if r.buf in stale and r != skip:
                raise WiringError(f"{op_where(program, o)}: reads `{r.buf}`, last written by "
                                  f"{stale[r.buf]}, which {option} drops")
        for d, r in writes(o):
            if d == "out" and r.buf:
                stale.pop(r.buf, None)
        if j in producers:
            c = o.args["c"].buf
            stale[c] = f"`{o.label}`'s output (added to the residual instead)"
