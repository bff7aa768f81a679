"""The RMSNorms of the one-row ``decode`` program as kern's own launches (``--own-norm``; an
option whose default depends on the model: :data:`DEFAULT_OWN_NORM`).

Why (issue 16): every captured norm (an Inductor kernel that also does the residual adds, 2 a
layer + the final norm) lets its dependents launch only after its final store (SASS
``PREEXIT`` after the last ``STG``), so under PDL the GEMV after it starts streaming its
weights only when the norm is done.  Each norm becomes one launch of kernels/rmsnorm.cu
(ABI.md 4g), which lets its dependents launch as soon as it starts, over kern's own f32
residual stream (:data:`~.fuse_norm.RESIDUAL`): norm 0 starts it from the embedding's output
(``norm_first``), norm ``t > 0`` adds the output of the GEMM right before it
(``norm_add``: the layer's ``o_proj`` or ``down_proj``, which stay plain GEMVs) and
normalises.  The kernels per step are unchanged (one launch replaces one).

The arithmetic is the captured kernels' (f32, one rounding); only the order of the f32
additions differs.  Made only where :mod:`.fuse_norm`'s proofs hold (the same helpers): the
norms are exactly the model's, in order; each one's last pointer is its normed output, read
by the GEMV right after it; norm 0 reads only the embedding's output; norm ``t > 0`` reads
the output of the GEMM right before it; and no kept op reads anything else a dropped norm
wrote (the residual sums Inductor stores for later norms) before a kept op writes it anew.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import fuse_norm as FN
from .errors import WiringError
from .ir import Buf, Op, Program, Ref, is_weight, op_where, reads

if TYPE_CHECKING:
    from .arch import Arch
    from .assemble import Assembler
    from .config import ModelConfig

DEFAULT_OWN_NORM = {"qwen3": True, "llama": True}
"""``--own-norm`` default by ``model_type`` (absent: off); never with an extension or
``--fuse-norm``.  Measured with ``kern-run bench --lever`` (same process, PDL on;
docs/measurements.md): qwen3 since session 27 (H200: the Qwen3-4B shape 2.635 -> 2.571
ms/token, teacher-forced against transformers median 0.0502, the captured norms' 0.0503);
llama since session 30 (H100: SmolLM2 0.516 -> 0.487, once the norms trigger first and the
small GEMVs early — session 27 had found it neutral before those; its teacher-forced error
vs fp32 median 0.0116 vs the captured norms' 0.0138, max 0.0663 vs 0.0878; greedy text
changed only at near-ties, HF-bf16 margins 0 to 0.125 logits)."""
PROGRAMS = FN.PROGRAMS
"""The programs the pass applies to (DSpark's ``decode_spec`` taps the hidden states the
captured norms store)."""
CUBIN = "rmsnorm.cubin"
SYMBOLS = {"norm_first": "kern_rmsnorm_first_bf16", "norm_add": "kern_rmsnorm_add_bf16"}
PARAMS = {"norm_first": ["in buffer<bf16>", "in buffer<bf16>", "out buffer<f32>",
                         "out buffer<bf16>"],
          "norm_add": ["in buffer<bf16>", "inout buffer<f32>", "in buffer<bf16>",
                       "out buffer<bf16>"]}
"""By op kind: ``[x, g, r, out]`` / ``[d, r, g, out]``; the step adds ``k`` (i32) and ``eps``
(f32) as literals (ABI.md 4g)."""
ARGS = {"norm_first": ("x", "g", "xo", "out"), "norm_add": ("d", "res", "g", "out")}
"""The op's argument names in parameter order (``xo`` / ``res``: the residual stream ``r``)."""
MAX_K = 8192
"""The widest row a block holds: 1024 threads of 8 elements."""


def own_norms(prog: Program, cfg: ModelConfig, arch: Arch) -> Program:
    """``prog`` with every captured RMSNorm replaced by an own launch (refused unless
    provable)."""
    ops = list(prog.ops)
    at = FN.norm_sites(prog, cfg, arch)
    res = Ref(buf=FN.RESIDUAL.format(p=prog.name))
    new: dict[int, Op] = {}
    for t, j in enumerate(at):
        norm, where = ops[j], op_where(prog.name, ops[j])
        out = FN.gemv_after(prog.name, ops, j, cfg).args["a"]
        g = Ref(buf=FN.norm_weight(norm))
        acts = [r for r in reads(norm) if not is_weight(r.buf)]
        common = {"g": g, "out": out, "k": cfg.hidden, "eps": cfg.eps}
        if t == 0:      # the stream starts: written only ("xo", ir.OUTPUT_ARGS)
            x = FN.first_residual(prog.name, ops, j, acts, where)
            new[j] = Op("norm_first", norm.label, norm.site, args={"x": x, "xo": res, **common})
        else:           # added to in place ("res", ir.INOUT_ARGS)
            d = FN.producer(ops, j, t, acts, where, cfg).args["c"]
            new[j] = Op("norm_add", norm.label, norm.site, args={"d": d, "res": res, **common})
    FN.nothing_stale(prog.name, ops, set(at), set(), "--own-norm")
    return FN.rewritten(prog, [new.get(j, o) for j, o in enumerate(ops)],
                        [Buf(res.buf, "f32", cfg.hidden, "workspace")])


def threads(k: int) -> int:
    """The block size for rows of ``k`` elements: one warp per 256 elements."""
    return 32 * -(-k // 256)


def norm(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    """An own norm launch (:func:`own_norms`): one block a row."""
    a, kind = op.args, op.kind
    k = a["k"]
    if k % 8 or not 0 < k <= MAX_K:
        raise WiringError(f"{program}: {op.label}: rows of {k} elements; "
                          f"`{SYMBOLS[kind]}` needs a multiple of 8 up to {MAX_K}")
    params = PARAMS[kind]
    st = asm.own_step(CUBIN, SYMBOLS[kind], params=[*params, "i32", "f32"],
                      block=[threads(k), 1, 1], grid=[rows, 1, 1],
                      args=[*({"arg": i} for i in range(len(params))), {"i32": k},
                            {"f32": a["eps"]}])
    name = asm.kernel(f"{program}.{kind}.{k}", {"params": params, "impl": {"steps": [st]}},
                      f"own `{SYMBOLS[kind]}` (RMSNorm{' 0' if kind == 'norm_first' else ''} "
                      f"over the f32 residual stream, dependents launched before its wait)")
    return {"label": op.label, "kernel": name, "args": [asm.arg(a[n]) for n in ARGS[kind]]}
