"""The hand-written wiring of a Llama-family forward onto a captured Inductor graph.

The generator knows the model: per layer ``input_layernorm -> q,k,v projections -> rope on
q; rope on k fused with the K-cache write; V-cache write -> attention -> o_proj -> residual
add + post_attention_layernorm -> gate, up -> SiLU*mul -> down``, then ``model.norm`` and the
tied ``lm_head``.  Inductor fuses and schedules these into call sites; this module *names*
each captured site by its role (from the kernel name Inductor derives from the fused ops),
checks it against the model (:mod:`.falsify`), and emits :class:`Op` s:

- mined sites (RMSNorm with its residual adds, q rope, k rope + K-cache write, V-cache
  write, SiLU*mul) are replayed with their captured ABI and literals;
- GEMMs (nvjet, packed params) become ``extern:cublaslt_bf16_tn`` with A/W/C taken from
  the pointers inside the packed struct (byte offsets 240/176/328 of the captured param);
- embedding, the rope angle computation (a cutlass sgemm with a by-value struct),
  attention (flex-attention templates over per-forward block masks and a repeat_kv copy of
  the whole cache) and the final argmax become own kernels;
- block-mask building, repeat_kv copies, flex partial/reduce kernels, the prefill
  transpose of the flex output (head-major ``[heads, tokens, head_dim]``, stored in the q
  rope output's storage) to the token-major o_proj input, and the per-layer cache-position
  bookkeeping (``add_copy_``) are dropped -- their only consumers are replaced.  q after
  rope is token-major ``[tokens, heads*head_dim]`` in both graphs (the own attention reads it
  with row stride ``heads*head_dim`` and writes token-major), the rope angles are
  ``[head_dim/2, tokens]`` (``tests/test_llama_inductor_evidence.py`` checks both against
  Inductor's generated code).

Inductor's residual stream does **not** keep one address: fused RMSNorm kernels take the
running residual *and* the pending attention/MLP outputs and recompute the sum, storing it
(``in_out_ptr``) only every few layers.  So the wiring does not assume a residual buffer;
it replays Inductor's buffer plan: each activation address of the forward (per dtype) is
one workspace buffer, and the generator proves that every buffer a kept kernel reads was
written earlier by a kept or substituted kernel (:func:`.ir.check_dataflow`).
"""

from __future__ import annotations

from .arch import Arch
from .config import ModelConfig
from .errors import WiringError
from .facts import Facts, Site
from . import falsify as F
from .kv import KVLayout
from .ir import (LOGITS, NEXT_TOKEN, POSITIONS, PREDICTIONS, TOK, Buf, Op, Program, Ref,
                 check_dataflow, mul, used_buffers)


class _Acts:
    """Activation addresses -> workspace buffers, keyed by (address, dtype)."""

    def __init__(self, program: str, decode: bool) -> None:
        self.program, self.decode = program, decode
        self.bufs: dict[str, Buf] = {}
        self.by_key: dict[tuple[int, str], str] = {}

    def get(self, addr: int, dtype: str, width: int, label: str) -> Ref:
        key = (addr, dtype)
        name = self.by_key.get(key)
        if name is None:
            name = f"{self.program}.{label}"
            n = 2
            while name in self.bufs:
                name, n = f"{self.program}.{label}.{n}", n + 1
            self.by_key[key] = name
            self.bufs[name] = Buf(name, dtype, width, "workspace")
        b = self.bufs[name]
        b.width = max(b.width, width)
        return Ref(buf=name)


def wire(facts: Facts, cfg: ModelConfig, program: str, group: int, max_len: int,
         arch: Arch) -> Program:
    """Walk the group's sites in call order and emit the program's ops (see module doc);
    ``arch``: the model family's roles, q/k kernel layouts and literals (:mod:`.arch`).

    ``program``: ``decode`` (the one-token group), ``prefill`` or ``verify`` (both the dynamic
    group).  ``prefill`` stops after the last V-cache write; ``verify`` keeps the whole
    forward and computes logits for every row: the captured prefill ``lm_head`` GEMM reads
    only the last row of the final norm's output (transformers' ``logits_to_keep=1``), which
    is asserted, and ``verify`` multiplies the whole output instead (``m = tokens``)."""
    decode = program == "decode"
    verify = program == "verify"
    sites = facts.sites(group)
    acts = _Acts(program, decode)
    kv = KVLayout.of(cfg, max_len)
    ops: list[Op] = []
    L = cfg.layers
    gemm_names = arch.gemm_weights(cfg, "lm_head.weight" in facts.weights)
    norm_names = arch.norm_weights(cfg)
    per_gemm_layer = len(arch.layer_gemms)
    expected = {"gemm": len(gemm_names), "norm": len(norm_names),
                **{r: n * L for r, n in arch.sites_per_layer(decode).items()}}
    count = dict.fromkeys(expected, 0)
    pending_splitk: Site | None = None

    def bind(s: Site, role: str, layer: int, where: str, labels: dict[str, str]
             ) -> dict[str, tuple[int, int, str, Ref]]:
        """Name the site's pointer parameters by ``arch.layout``: name -> (param, address,
        direction, ref), buffers taken in parameter order."""
        names = arch.layout.get((role, decode))
        if names is None:
            F.fail(where, f"no `{role}` kernel in the {program} graph of this architecture")
        flat = s.flat_ptrs()
        _count(flat, len(names), where)
        out: dict[str, tuple[int, int, str, Ref]] = {}
        for (p, a), nm in zip(flat, names):
            if nm == "angles":
                out[nm] = (p, a, "in", _angles(acts, a, cfg, angles, where))
            elif nm == "positions":
                out[nm] = (p, a, "in", POSITIONS)
            elif nm == "norm_w":
                w = f"model.layers.{layer}.self_attn.{labels['norm_w']}.weight"
                F.weight_is(facts, s, (p, 0), w, where)
                out[nm] = (p, a, "in", Ref(buf=w))
            elif nm == "cache":
                out[nm] = (p, a, "inout", kv.k(layer))
            else:
                d = {"out": "out", "q_io": "inout"}.get(nm, "in")
                dt, wd = ("f32", cfg.heads if labels.get("x") == "q" else cfg.kv_heads) \
                    if nm == "var" else ("bf16", cfg.kv_width if nm == "k" or
                                         labels.get("x") == "k" else cfg.q_width)
                if role == "qk_var" and nm == "var":
                    d = "out"
                out[nm] = (p, a, d, acts.get(a, dt, wd, f"L{layer}.{labels[nm]}"))
        if role in arch.eps_roles:
            F.eps_literal(facts, s, cfg.eps, where)
        return out
    layer_q: dict[int, tuple[Ref, Site]] = {}
    layer_tr: dict[int, int] = {}
    n_tr = 0
    gemm_c: dict[str, int] = {}
    angles: Ref | None = None
    last_v = -1
    dyn = not decode
    final_norm: tuple[int, Ref] | None = None     # (address, ref) of model.norm's output
    logits: Ref | None = None                     # the lm_head GEMM's output

    for s in sites:
        role = arch.role_of(s)
        if role == "drop":
            continue
        if role == "splitk_reduce":
            # cuBLASLt split-K: the GEMM wrote partial sums to its workspace (packed struct
            # bytes 688/752), this kernel sums them into C.  The extern replaces both: assert
            # that it reduces exactly the preceding GEMM's workspace into its C (any other
            # reader of the workspace would fail the dataflow check below)
            where = s.where(program, "splitKreduce")
            g = pending_splitk
            if g is None:
                F.fail(where, "split-K reduce not directly after a split-K GEMM")
            for p in (2, 4):
                F.same_address(s.ptrs.get((p, 0)), g.ptrs.get((0, 328)), where,
                               f"split-K reduce param {p} is the preceding GEMM's C")
            for p in (1, 3):
                F.same_address(s.ptrs.get((p, 0)), g.ptrs.get((0, 688)), where,
                               f"split-K reduce param {p} is the preceding GEMM's workspace")
            pending_splitk = None
            continue
        if pending_splitk is not None:
            F.fail(pending_splitk.where(program, "gemm"), f"split-K GEMM not followed by its "
                   f"cuBLASLt reduce (next: site {s.index} `{s.name}`)")
        k = count.get(role, 0)
        per_layer = role in ("k_rope_cache", "v_cache", "q_rope", "silu", "q_rope_sin")
        where = s.where(program, f"{role}, layer {k}" if per_layer else role)
        if role in count:
            count[role] = k + 1
        if role == "embed":
            F.weight_is(facts, s, (1, 0), "model.embed_tokens.weight", where)
            out = acts.get(s.ptrs[(2, 0)], "bf16", cfg.hidden, "embed.out")
            ops.append(Op("embedding", "embed", s, args={"out": out}))
        elif role == "rope_angles":
            inv = facts.weights.get("model.rotary_emb.inv_freq")
            if inv is None or inv.ptr not in (s.ptrs.get((0, 280)), s.ptrs.get((0, 288))):
                F.fail(where, "neither sgemm operand (struct bytes 280/288) is the sidecar's "
                              "`model.rotary_emb.inv_freq`")
            F.same_address(s.ptrs.get((0, 296)), s.ptrs.get((0, 304)), where,
                           "sgemm C and D (struct bytes 296/304) differ")
            # the sgemm writes [head_dim/2, tokens] (HF's inv_freq[:, None] @ positions)
            angles = acts.get(s.ptrs[(0, 296)], "f32", cfg.head_dim // 2, "rope.angles")
            ops.append(Op("angles", "rope angles", s, args={"out": angles}))
        elif role == "gemm":
            if k >= len(gemm_names):
                F.fail(where, f"GEMM #{k} beyond the {len(gemm_names)} the model has")
            wname = gemm_names[k]
            w = F.weight_is(facts, s, (0, 176), wname, where)
            if "splitK" in s.name:
                pending_splitk = s
            n_out, k_in = w.shape
            lab = wname.removeprefix("model.").removesuffix(".weight").replace("layers.", "L")
            short = lab.split(".")[-1]
            gemm_c[f"{k // per_gemm_layer}.{short}"] = s.ptrs[(0, 328)]
            if short == "o_proj":
                layer = k // per_gemm_layer
                q, qsite = layer_q.get(layer, (None, None))
                if q is None:
                    F.fail(where, f"layer {layer}: o_proj before any q rope")
                if dyn:
                    # prefill: q rope writes q token-major [tokens, heads*head_dim] (the same
                    # index for its load and store); the captured flex attention wrote its
                    # output head-major [heads, tokens, head_dim] into q's storage and the
                    # captured `..._t_transpose_..._10` made it token-major for o_proj.  The
                    # own attention reads the token-major q and writes token-major, straight
                    # into o_proj's input: the transpose is replaced (see `attn_transpose`)
                    tr = layer_tr.get(layer)
                    if tr is None:
                        F.fail(where, f"layer {layer}: no head-major -> token-major transpose "
                                      f"of the attention output before o_proj in the prefill "
                                      f"graph")
                    F.same_address(s.ptrs.get((0, 240)), tr, where,
                                   "o_proj reads A at the captured attention-output "
                                   "transpose's output")
                out = acts.get(s.ptrs[(0, 240)], "bf16", cfg.q_width, f"L{layer}.attn.out")
                ops.append(Op("attention", f"L{layer}.attn", None, args={
                    "q": q, "k": kv.k(layer), "v": kv.v(layer), "out": out}))
            a = acts.get(s.ptrs[(0, 240)], "bf16", k_in, f"{lab}.in")
            if verify and k == len(gemm_names) - 1:
                a = _last_row_reader(facts, s, group, final_norm, cfg.hidden, where)
            if decode and k == len(gemm_names) - 1:
                c = LOGITS
            else:
                c = acts.get(s.ptrs[(0, 328)], "bf16", n_out, f"{lab}.out")
            if k == len(gemm_names) - 1:
                logits = c
            ops.append(Op("gemm", lab, s, args={"a": a, "w": Ref(buf=wname), "c": c,
                                                 "n": n_out, "k": k_in}))
        elif role == "norm":
            if k >= len(norm_names):
                F.fail(where, f"RMSNorm #{k} beyond the {len(norm_names)} the model has")
            wname = norm_names[k]
            flat = s.flat_ptrs()
            wp = [p for p, a in flat if facts.tensor_at(a) and facts.tensor_at(a)[0] == "weight"]
            if len(wp) != 1:
                F.fail(where, f"expected exactly one weight pointer ({wname}), found {len(wp)}")
            F.weight_is(facts, s, (wp[0], 0), wname, where)
            F.scalars_are(s, [TOK, cfg.hidden] if dyn else [cfg.hidden], where)
            F.eps_literal(facts, s, cfg.eps, where)
            lab = wname.removeprefix("model.").removesuffix(".weight").replace("layers.", "L")
            acts_p = [p for p, _ in flat if p != wp[0]]
            ptrs = {wp[0]: ("in", Ref(buf=wname))}
            for p, a in flat:
                if p == wp[0]:
                    continue
                d = "out" if p == acts_p[-1] else "inout"
                ptrs[p] = (d, acts.get(a, "bf16", cfg.hidden,
                                       f"{lab}.out" if d == "out" else f"{lab}.res"))
                if d == "out" and k == len(norm_names) - 1:
                    final_norm = (a, ptrs[p][1])
            ops.append(Op("mined", lab, s, ptrs=ptrs))
        elif role == "qk_var":
            layer, which = k // 2, "qk"[k % 2]
            b = bind(s, role, layer, where, {"x": which, "var": f"{which}_var"})
            F.same_address(b["x"][1], gemm_c.get(f"{layer}.{which}_proj"), where,
                           f"{which} variance reads {which} at the {which}_proj GEMM output")
            F.scalars_are(s, arch.scalars(cfg, role, decode, which), where)
            ops.append(Op("mined", f"L{layer}.{which}_var", s,
                          ptrs={p: (d, r) for p, _, d, r in b.values()}))
        elif role in ("q_rope", "q_rope_sin"):
            layer = k
            sin = role == "q_rope_sin"
            b = bind(s, role, layer, where, {"q": "q", "q_io": "q", "norm_w": "q_norm",
                                             "var": "q_var", "sin": "q_sin",
                                             "out": "q_sin" if sin else "q_rot", "x": "q"})
            F.same_address(b["q" if "q" in b else "q_io"][1], gemm_c.get(f"{layer}.q_proj"),
                           where, "q rope reads q at the q_proj GEMM output (offset 0)")
            F.scalars_are(s, arch.scalars(cfg, role, decode), where)
            if not sin:
                layer_q[layer] = (b["out" if "out" in b else "q_io"][3], s)
            ops.append(Op("mined", f"L{layer}.{role}", s,
                          ptrs={p: (d, r) for p, _, d, r in b.values()}))
        elif role == "k_rope_cache":
            layer = k
            b = bind(s, role, layer, where, {"k": "k", "norm_w": "k_norm", "var": "k_var",
                                             "x": "k"})
            F.same_address(b["k"][1], gemm_c.get(f"{layer}.k_proj"), where,
                           "k rope reads k at the k_proj GEMM output (offset 0)")
            t = F.cache_is(facts, s, b["cache"][0], f"layers.{layer}.keys", where)
            F.cache_layout(t, kv, where)
            F.scalars_are(s, arch.scalars(cfg, role, decode), where)
            ops.append(Op("mined", f"L{layer}.k_rope_cache", s,
                          ptrs={p: (d, r) for p, _, d, r in b.values()}))
        elif role == "v_cache":
            layer = k
            flat = s.flat_ptrs()
            _count(flat, 3, where)
            F.same_address(flat[1][1], gemm_c.get(f"{layer}.v_proj"), where,
                           "V-cache write reads v at the v_proj GEMM output (offset 0)")
            t = F.cache_is(facts, s, flat[2][0], f"layers.{layer}.values", where)
            F.cache_layout(t, kv, where)
            F.scalars_are(s, [mul(TOK, cfg.kv_width)] if dyn else [cfg.kv_width], where)
            vin = acts.get(flat[1][1], "bf16", cfg.kv_width, f"L{layer}.v")
            ops.append(Op("mined", f"L{layer}.v_cache", s, ptrs={
                flat[0][0]: ("in", POSITIONS), flat[1][0]: ("in", vin),
                flat[2][0]: ("inout", kv.v(layer))}))
            last_v = len(ops)
        elif role == "attn_transpose":
            # prefill only: the captured flex attention's output is head-major
            # [heads, tokens, head_dim] in the storage of the q rope output (Inductor reuses
            # it); this kernel reads it there and writes it token-major for o_proj.  The own
            # attention writes token-major directly, so the kernel is replaced, not replayed
            # (replaying it on the token-major q would permute q's rows for tokens > 1).
            layer = n_tr
            n_tr += 1
            flat = s.flat_ptrs()
            _count(flat, 2, where)
            q_rot = layer_q.get(layer)
            if q_rot is None or acts.by_key.get((flat[0][1], "bf16")) != q_rot[0].buf:
                F.fail(where, f"layer {layer}: the transpose does not read the storage of the "
                              f"q rope output (which the captured attention reused for its "
                              f"output)")
            F.scalars_are(s, [TOK, mul(TOK, cfg.q_width)], where)
            layer_tr[layer] = flat[1][1]
        elif role == "silu":
            layer = k
            flat = s.flat_ptrs()
            _count(flat, 2, where)
            F.same_address(flat[0][1], gemm_c.get(f"{layer}.gate_proj"), where,
                           "SiLU*mul reads gate at the gate_proj GEMM output")
            F.same_address(flat[1][1], gemm_c.get(f"{layer}.up_proj"), where,
                           "SiLU*mul reads up at the up_proj GEMM output")
            F.scalars_are(s, [mul(TOK, cfg.intermediate)] if dyn else [cfg.intermediate],
                          where)
            ops.append(Op("mined", f"L{layer}.silu_mul", s, ptrs={
                flat[0][0]: ("inout", acts.get(flat[0][1], "bf16", cfg.intermediate,
                                               f"L{layer}.gate")),
                flat[1][0]: ("in", acts.get(flat[1][1], "bf16", cfg.intermediate,
                                            f"L{layer}.up"))}))
        elif role == "argmax":
            if logits is None:
                F.fail(where, "argmax before the lm_head GEMM")
            ops.append(Op("argmax", "argmax", s, args={
                "logits": logits, "out": PREDICTIONS if verify else NEXT_TOKEN}))

    if pending_splitk is not None:
        F.fail(pending_splitk.where(program, "gemm"), "split-K GEMM without its reduce")
    for r, n in expected.items():
        if count[r] != n:
            raise WiringError(f"{program} (group {group}): {count[r]} `{r}` sites; the model "
                              f"has {n}")
    if program == "prefill":
        ops = ops[:last_v]          # prefill fills the KV state only
    elif not any(o.kind == "argmax" for o in ops):
        raise WiringError(f"{program} (group {group}): no argmax at the end of the forward")
    check_dataflow(program, ops)
    used = used_buffers(ops)
    bufs = {k: b for k, b in acts.bufs.items() if k in used}
    return Program(program, 1 if decode else TOK, ops, bufs)


def _count(flat: list, n: int, where: str) -> None:
    if len(flat) != n:
        F.fail(where, f"{len(flat)} pointer parameters; the wiring expects {n}")


def _angles(acts: _Acts, addr: int, cfg: ModelConfig, angles: Ref | None, where: str) -> Ref:
    ref = acts.get(addr, "f32", cfg.head_dim // 2, "rope.angles")
    if angles is None or ref.buf != angles.buf:
        F.fail(where, f"reads rope angles at {addr:#x}, not where the captured angle sgemm "
                      f"wrote them")
    return ref


def _last_row_reader(facts: Facts, s: Site, group: int, final_norm: tuple[int, Ref] | None,
                     hidden: int, where: str) -> Ref:
    """``verify``'s lm_head input: the final norm's whole output.  Asserted: the captured
    prefill lm_head GEMM reads A at that output's last row of the forward whose addresses the
    site holds (``(tokens - 1) * hidden`` bf16 elements in), i.e. it is the same tensor."""
    if final_norm is None:
        F.fail(where, "lm_head GEMM before the final norm (`model.norm`)")
    addr, ref = final_norm
    tokens = facts.group(group).tokens[0]
    if tokens is None:
        F.fail(where, "the forward's token count is unknown")
    F.same_address(s.ptrs.get((0, 240)), addr + (int(tokens) - 1) * hidden * 2, where,
                   f"lm_head reads A at the last of the {tokens} rows of the final norm's "
                   f"output")
    return ref
