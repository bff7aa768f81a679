"""The draft's two programs, cut from the captured dynamic graph (docs/dspark.md):

- ``draft`` (tokens = the block): the embedding, the target's first ``n`` layers run on the
  draft's weights and KV (``draft.layers.{j}``, ``draft.kv.L{j}``) exactly as captured — q/k
  rope, cache writers, SiLU·mul and the fused residual norms are the mined kernels, the own
  attention reads each row's keys up to its ``kv_lens`` (the caller writes p + B for every
  row: non-causal inside the block) —, then layer n's input norm, which normalises the state
  after draft layer n − 1, with the draft's final norm weight, the shared ``lm_head`` on every
  row and the Markov head unrolled over the block: step t is one own kernel (ABI.md 2a,
  :mod:`..llama.markov`) taking the argmax of ``logits[t] + markov_w2 · markov_w1[prev]`` into
  ``draft_tokens[t]``, which is the next step's prev (step 0's prev: ``token_ids[0]``).
- ``draft_precompute`` (tokens = the rows in ``carry``): layer 0's input-norm kernel (a plain
  RMSNorm: it reads one activation) on ``carry`` with ``draft.hidden_norm``, then per draft
  layer only the K/V path of the captured layer: k_proj and v_proj (views of the merged
  qkv weight) on that normed context, Qwen3's k variance and k rope's sin half, and the k rope
  + cache writer (which also writes V in the dynamic graph).

Asserted, besides every fact the walk over the whole captured graph asserts: the cut ops are
the captured ones in captured order, and every buffer a kept op reads still comes from the
op that produced it in the captured graph (:func:`same_producers`), except the reads this
module re-points (carry, the context); the programs' dataflow holds.
"""

from __future__ import annotations

from dataclasses import replace

from ..llama import merge as M
from ..llama.config import ModelConfig
from ..llama.errors import WiringError
from kern_manifest import contract as C

from ..llama.ir import (CARRY, DRAFT_TOKENS, INPUTS, POSITIONS, PREDICTIONS, TOK, TOKEN_IDS, Buf,
                        Op, Program, Ref, check_dataflow, is_weight, reads, used_buffers,
                        writes)
from ..llama.wiring import Cut, Inputs, Wiring, wire
from . import names
from .spec import DraftSpec

I64 = 8


def _index(w: Wiring, label: str, kind: str = "mined") -> int:
    hit = [i for i, o in enumerate(w.ops) if o.kind == kind and o.label == label]
    if len(hit) != 1:
        raise WiringError(f"{w.program}: {len(hit)} ops `{label}` in the captured graph; "
                          f"expected one")
    return hit[0]


def same_producers(program: str, captured: list[Op], kept: list[tuple[int, Op]],
                   repointed: set[tuple[int, str]]) -> None:
    """Every read of a kept op (``(captured index, op)``) comes from the kept op that wrote it
    last in the captured order, unless ``(captured index, buffer)`` is in ``repointed``."""
    def last(ops: list[tuple[int, Op]], before: int, buf: str) -> int | None:
        hit = None
        for ci, o in ops:
            if ci >= before:
                break
            if buf in [r.buf for _, r in writes(o)]:
                hit = ci
        return hit
    cap = list(enumerate(captured))
    fixed = {r.buf for r in INPUTS} | {CARRY.buf}
    for ci, o in kept:
        for r in reads(captured[ci]):
            b = r.buf
            if not b or b in fixed or is_weight(b) or (ci, b) in repointed:
                continue
            want, got = last(cap, ci, b), last(kept, ci, b)
            if want != got:
                raise WiringError(f"{program}: `{o.label}` reads `{b}`, written last by "
                                  f"captured op {want} but in the cut by {got}")


def _renamed(prog: Program, layers: int, cfg: ModelConfig) -> Program:
    """Weights as merged views, then target layer weights/states -> the draft's."""
    prog = M.merge_projections(prog, cfg)

    def ren(o: Op) -> Op:
        return replace(o, ptrs={p: (d, names.rename(r, layers)) for p, (d, r) in o.ptrs.items()},
                       args={k: names.rename(v, layers) if isinstance(v, Ref) else v
                             for k, v in o.args.items()})
    return replace(prog, ops=[ren(o) for o in prog.ops])


def _finish(name: str, w: Wiring, ops: list[Op], extra: list[Buf]) -> Program:
    check_dataflow(name, ops)
    used = used_buffers(ops)
    bufs = {k: b for k, b in w.acts.bufs.items() if k in used}
    bufs.update({b.name: b for b in extra})
    return Program(name, TOK, ops, bufs)


def draft(g: Inputs, spec: DraftSpec) -> Program:
    cfg, n, B, V = g.cfg, spec.layers, spec.block, g.cfg.vocab
    w = wire(g, Cut("draft", g.prefill_group, every_row=True, argmax_out=DRAFT_TOKENS))
    k = _index(w, f"L{n}.input_layernorm")
    norm = w.ops[k]
    outs = [r for d, r in norm.ptrs.values() if d == "out"]
    if len(outs) != 1:
        raise WiringError(f"draft: `{norm.label}` writes {len(outs)} outputs; a norm writes one")
    wp = [p for p, (d, r) in norm.ptrs.items() if is_weight(r.buf)]
    final = replace(norm, label="norm", ptrs={**norm.ptrs, wp[0]: ("in", Ref(buf=names.FINAL_NORM))})
    body = _renamed(Program("draft", TOK, w.ops[:k] + [final], {}), n, cfg).ops
    logits = Ref(buf="draft.logits")
    # lm_head on the block's B rows exactly (draft.logits is [B, vocab]: the Markov steps
    # address its rows by literal offsets)
    ops = body + [Op("gemm", "lm_head", None, args={
        "a": outs[0], "w": Ref(buf=w.gemm_names[-1]), "c": logits, "n": V, "k": cfg.hidden,
        "rows": B})]
    for t in range(B):
        prev = TOKEN_IDS if t == 0 else Ref(buf=DRAFT_TOKENS.buf, offset=(t - 1) * I64)
        at = Ref(buf=logits.buf, offset=t * V * 2)
        ops.append(Op("markov", f"markov{t}", None, args={
            "prev": prev, "w1": Ref(buf=names.MARKOV_W1), "w2": Ref(buf=names.MARKOV_W2),
            "logits": at, "out": Ref(buf=DRAFT_TOKENS.buf, offset=t * I64),
            "rank": spec.markov_rank}))
    return _finish("draft", w, ops, [
        Buf(logits.buf, "bf16", V, "workspace", shape=[B, V]),
        Buf(DRAFT_TOKENS.buf, "i64", 1, "output", shape=[B])])


def accepting(verify: Program, spec: DraftSpec) -> Program:
    """``verify`` with the in-graph acceptance step last (:mod:`..llama.accept`, ABI.md 6):
    it reads the program's own ``token_ids``, ``predictions`` and ``positions`` and writes the
    ``next.*`` outputs of the caller contract (``kern_manifest.contract.NEXT_INPUTS``)."""
    B = spec.block
    outs = {"next_ids": C.NEXT_TOKEN_IDS, "next_pos": C.NEXT_POSITIONS,
            "draft_lens": C.NEXT_DRAFT_KV_LENS, "verify_lens": C.NEXT_VERIFY_KV_LENS}
    op = Op("accept", "accept", None, args={
        "ids": TOKEN_IDS, "preds": PREDICTIONS, "positions": POSITIONS,
        **{k: Ref(buf=n) for k, n in outs.items()}, "block": B, "mask": spec.mask_token_id})
    ops = verify.ops + [op]
    check_dataflow(verify.name, ops)
    bufs = dict(verify.bufs)
    for n in outs.values():
        dtype, extra = C.NEXT_INPUTS[n]
        bufs[n] = Buf(n, dtype, 1, "output", shape=[B + extra])
    return replace(verify, ops=ops, bufs=bufs)


K_PATH = ("self_attn.k_proj", "self_attn.v_proj", "k_var", "k_rope_sin", "k_rope_cache",
          "v_cache")
"""The labels (after ``L{j}.``) of a captured layer's K/V path, whichever the family has."""


def precompute(g: Inputs, spec: DraftSpec, name: str = "draft_precompute") -> Program:
    """The precompute program ``name``: ``draft_precompute`` (the round's few rows; its GEMMs
    the ``--gemm`` implementation) or ``draft_precompute_prefill`` (the prompt's chunks; the
    same cut, its GEMMs prefill's cuBLASLt: :data:`..llama.programs.GEMV_GEMMS`)."""
    cfg, n = g.cfg, spec.layers
    w = wire(g, Cut(name, g.prefill_group))
    k0 = _index(w, "L0.input_layernorm")
    norm = w.ops[k0]
    acts = [(p, d) for p, (d, r) in norm.ptrs.items() if not is_weight(r.buf)]
    ins = [p for p, d in acts if d == "in"]
    outs = [p for p, d in acts if d == "out"]
    if len(ins) != 1 or len(outs) != 1 or len(acts) != 2:
        raise WiringError(f"{name}: `{norm.label}` is not a plain RMSNorm (one activation in, "
                          f"one out: {acts}); the context norm needs one")
    wp = [p for p, (d, r) in norm.ptrs.items() if is_weight(r.buf)][0]
    ctx = Ref(buf=f"{name}.ctx")
    ctx_norm = replace(norm, label="ctx_norm", ptrs={
        wp: ("in", Ref(buf=names.HIDDEN_NORM)), ins[0]: ("in", CARRY), outs[0]: ("out", ctx)})
    kept: list[tuple[int, Op]] = [(k0, ctx_norm)]
    repointed: set[tuple[int, str]] = set()
    want = {f"L{j}.{p}" for j in range(n) for p in K_PATH}
    for i, o in enumerate(w.ops):
        if o.kind == "angles":
            kept.append((i, o))
        elif o.label in want:
            if o.kind == "gemm":
                src = w.ops[_index(w, f"L{o.label.split('.')[0][1:]}.input_layernorm")]
                if o.args["a"] not in [r for d, r in src.ptrs.values() if d == "out"]:
                    raise WiringError(f"{name}: `{o.label}` does not read its layer's input "
                                      f"norm output")
                repointed.add((i, o.args["a"].buf))
                o = replace(o, args={**o.args, "a": ctx})
            kept.append((i, o))
    kept.sort(key=lambda t: t[0])
    same_producers(name, w.ops, kept, repointed | {(k0, r.buf) for r in reads(norm)})
    prog = _renamed(Program(name, TOK, [o for _, o in kept], {}), n, cfg)
    return _finish(name, w, prog.ops, [Buf(ctx.buf, "bf16", cfg.hidden, "workspace")])
