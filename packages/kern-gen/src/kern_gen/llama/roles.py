"""One handler per role of a captured site: assert the site's facts, emit its ops.

:func:`.wiring.wire` calls ``HANDLERS[role](w, site)`` for every site of the walked graph, in
call order (the role from ``Arch.role_of``); ``w`` is the walk's state
(:class:`.wiring.Wiring`).  A handler asserts what the wiring assumes of the site
(:mod:`.falsify`), appends its :class:`.ir.Op` s to ``w.ops`` and records what later sites are
checked against (GEMM outputs, the roped q, the rope angles, the final norm's output).
Handlers of replaced kernels (the split-K reduce, the prefill attention-output transpose)
only assert and record.  A new role is one ``wire_<role>`` function and one row of
:data:`HANDLERS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from . import falsify as F
from . import writers as W
from .arch import EMBED, INV_FREQ
from .facts import Site
from .ir import SLOTS, TOK, Op, Ref, mul

if TYPE_CHECKING:
    from .wiring import Wiring

# Pointers inside the captured packed parameter structs, as ``Site.ptrs`` keys (param, byte
# offset).  nvjet GEMM (cuBLASLt's packed params, ``C = A @ W^T``): A, W, C, and the split-K
# workspace (its partial sums; the struct holds it again at byte 752).
GEMM_A, GEMM_W, GEMM_C, GEMM_WORKSPACE = (0, 240), (0, 176), (0, 328), (0, 688)
# cutlass sgemm of the rope angles (``D = A @ B + C``, C = D in place): one operand is
# ``inv_freq``, the other the positions.
SGEMM_A, SGEMM_B, SGEMM_C, SGEMM_D = (0, 280), (0, 288), (0, 296), (0, 304)

Handler = Callable[["Wiring", Site], None]


def _label(weight: str) -> str:
    """``model.layers.3.mlp.up_proj.weight`` -> ``L3.mlp.up_proj`` (op and buffer labels)."""
    return weight.removeprefix("model.").removesuffix(".weight").replace("layers.", "L")


def _count(flat: list, n: int, where: str) -> None:
    if len(flat) != n:
        F.fail(where, f"{len(flat)} pointer parameters; the wiring expects {n}")


def _mined(label: str, s: Site, bound: dict[str, tuple[int, int, str, Ref]]) -> Op:
    return Op("mined", label, s, ptrs={p: (d, r) for p, _, d, r in bound.values()})


def bind(w: Wiring, s: Site, role: str, layer: int, where: str, labels: dict[str, str]
         ) -> dict[str, tuple[int, int, str, Ref]]:
    """Name a mined q/k kernel's pointer parameters by ``arch.layout``: name -> (param,
    address, direction, ref), buffers taken in parameter order; ``labels``: layout name ->
    buffer label (``x``: the variance kernel's input, ``q`` or ``k``)."""
    cfg = w.cfg
    names = w.arch.layout.get((role, w.decode))
    if names is None:
        F.fail(where, f"no `{role}` kernel in the {w.program} graph of this architecture")
    flat = s.flat_ptrs()
    _count(flat, len(names), where)
    out: dict[str, tuple[int, int, str, Ref]] = {}
    for (p, a), nm in zip(flat, names):
        if nm == "angles":
            out[nm] = (p, a, "in", _angles(w, a, where))
        elif nm == "slots":
            F.slots_input(w.facts, s, a, where)
            out[nm] = (p, a, "in", SLOTS)
        elif nm == "norm_w":
            wname = f"model.layers.{layer}.self_attn.{labels['norm_w']}.weight"
            F.weight_is(w.facts, s, (p, 0), wname, where)
            out[nm] = (p, a, "in", Ref(buf=wname))
        elif nm in ("cache", "vcache"):
            out[nm] = (p, a, "inout", w.kv.k(layer) if nm == "cache" else w.kv.v(layer))
        else:
            d = {"out": "out", "q_io": "inout"}.get(nm, "in")
            dt, wd = ("f32", cfg.heads if labels.get("x") == "q" else cfg.kv_heads) \
                if nm == "var" else ("bf16", cfg.kv_width if nm in ("k", "v") or
                                     labels.get("x") == "k" else cfg.q_width)
            if role == "qk_var" and nm == "var":
                d = "out"
            out[nm] = (p, a, d, w.acts.get(a, dt, wd, f"L{layer}.{labels[nm]}"))
    if role in w.arch.eps_roles:
        F.eps_literal(w.facts, s, cfg.eps, where)
    return out


def _angles(w: Wiring, addr: int, where: str) -> Ref:
    ref = w.acts.get(addr, "f32", w.cfg.head_dim // 2, "rope.angles")
    if w.angles is None or ref.buf != w.angles.buf:
        F.fail(where, f"reads rope angles at {addr:#x}, not where the captured angle sgemm "
                      f"wrote them")
    return ref


# --- replaced or dropped ------------------------------------------------------------------

def wire_drop(w: Wiring, s: Site) -> None:
    """Block masks, repeat_kv copies, flex partial/reduce kernels, cache-position
    bookkeeping: every consumer is replaced (the dataflow check proves it)."""


def wire_splitk_reduce(w: Wiring, s: Site) -> None:
    """cuBLASLt split-K: the GEMM wrote partial sums to its workspace, this kernel sums them
    into C.  The extern replaces both: assert that it reduces exactly the preceding GEMM's
    workspace into its C (any other reader of the workspace fails the dataflow check)."""
    where = s.where(w.program, "splitKreduce")
    g = w.pending_splitk
    if g is None:
        F.fail(where, "split-K reduce not directly after a split-K GEMM")
    for p in (2, 4):
        F.same_address(s.ptrs.get((p, 0)), g.ptrs.get(GEMM_C), where,
                       f"split-K reduce param {p} is the preceding GEMM's C")
    for p in (1, 3):
        F.same_address(s.ptrs.get((p, 0)), g.ptrs.get(GEMM_WORKSPACE), where,
                       f"split-K reduce param {p} is the preceding GEMM's workspace")
    w.pending_splitk = None


def wire_attn_transpose(w: Wiring, s: Site) -> None:
    """Prefill only: the captured flex attention's output is head-major [heads, tokens,
    head_dim] in the storage of the q rope output (Inductor reuses it); this kernel reads it
    there and writes it token-major for o_proj.  The own attention writes token-major
    directly, so the kernel is replaced, not replayed (replaying it on the token-major q
    would permute q's rows for tokens > 1)."""
    layer, where = w.enter(s, "attn_transpose")
    flat = s.flat_ptrs()
    _count(flat, 2, where)
    q_rot = w.layer_q.get(layer)
    if q_rot is None or w.acts.by_key.get((flat[0][1], "bf16")) != q_rot[0].buf:
        F.fail(where, f"layer {layer}: the transpose does not read the storage of the "
                      f"q rope output (which the captured attention reused for its "
                      f"output)")
    F.scalars_are(s, [TOK, mul(TOK, w.cfg.q_width)], where)
    w.layer_tr[layer] = flat[1][1]


# --- own kernels --------------------------------------------------------------------------

def wire_embed(w: Wiring, s: Site) -> None:
    _, where = w.enter(s, "embed")
    F.weight_is(w.facts, s, (1, 0), EMBED, where)
    out = w.acts.get(s.ptrs[(2, 0)], "bf16", w.cfg.hidden, "embed.out")
    w.ops.append(Op("embedding", "embed", s, args={"out": out}))


def wire_rope_angles(w: Wiring, s: Site) -> None:
    """The captured cutlass sgemm ``inv_freq x positions`` (a by-value struct) -> the own
    angle kernel; it writes [head_dim/2, tokens] (HF's ``inv_freq[:, None] @ positions``)."""
    _, where = w.enter(s, "rope_angles")
    inv = w.facts.weights.get(INV_FREQ)
    if inv is None or inv.ptr not in (s.ptrs.get(SGEMM_A), s.ptrs.get(SGEMM_B)):
        F.fail(where, f"neither sgemm operand (struct bytes {SGEMM_A[1]}/{SGEMM_B[1]}) is "
                      f"the sidecar's `{INV_FREQ}`")
    F.same_address(s.ptrs.get(SGEMM_C), s.ptrs.get(SGEMM_D), where,
                   f"sgemm C and D (struct bytes {SGEMM_C[1]}/{SGEMM_D[1]}) differ")
    w.angles = w.acts.get(s.ptrs[SGEMM_C], "f32", w.cfg.head_dim // 2, "rope.angles")
    w.ops.append(Op("angles", "rope angles", s, args={"out": w.angles}))


def wire_argmax(w: Wiring, s: Site) -> None:
    _, where = w.enter(s, "argmax")
    if w.logits is None:
        F.fail(where, "argmax before the lm_head GEMM")
    w.ops.append(Op("argmax", "argmax", s, args={
        "logits": w.logits, "out": w.cut.argmax_out}))


def _attention(w: Wiring, s: Site, layer: int, where: str) -> None:
    """The own attention of ``layer``, emitted before its o_proj: it reads the roped q and
    writes o_proj's input.  Prefill: q rope writes q token-major [tokens, heads*head_dim]
    (the same index for its load and store); the captured flex attention wrote its output
    head-major [heads, tokens, head_dim] into q's storage and the captured
    ``..._t_transpose_..._10`` made it token-major for o_proj.  The own attention reads the
    token-major q and writes token-major, straight into o_proj's input: the transpose is
    replaced (:func:`wire_attn_transpose`)."""
    q, _ = w.layer_q.get(layer, (None, None))
    if q is None:
        F.fail(where, f"layer {layer}: o_proj before any q rope")
    if not w.decode:
        tr = w.layer_tr.get(layer)
        if tr is None:
            F.fail(where, f"layer {layer}: no head-major -> token-major transpose "
                          f"of the attention output before o_proj in the prefill "
                          f"graph")
        F.same_address(s.ptrs.get(GEMM_A), tr, where,
                       "o_proj reads A at the captured attention-output "
                       "transpose's output")
    out = w.acts.get(s.ptrs[GEMM_A], "bf16", w.cfg.q_width, f"L{layer}.attn.out")
    w.ops.append(Op("attention", f"L{layer}.attn", None, args={
        "q": q, "k": w.kv.k(layer), "v": w.kv.v(layer), "out": out}))


# --- externs ------------------------------------------------------------------------------

def wire_gemm(w: Wiring, s: Site) -> None:
    """nvjet GEMM -> the GEMM extern, A/W/C from the packed struct; W is the weight the
    wiring names (the layers' in call order, then lm_head).  o_proj is preceded by the own
    attention; lm_head reads and writes where the program's cut says."""
    k, where = w.enter(s, "gemm")
    names = w.gemm_names
    if k >= len(names):
        F.fail(where, f"GEMM #{k} beyond the {len(names)} the model has")
    wname = names[k]
    n_out, k_in = F.weight_is(w.facts, s, GEMM_W, wname, where).shape
    if "splitK" in s.name:
        w.pending_splitk = s
    lab = _label(wname)
    short = lab.split(".")[-1]
    layer = k // len(w.arch.layer_gemms)
    w.gemm_c[f"{layer}.{short}"] = s.ptrs[GEMM_C]
    if short == "o_proj":
        _attention(w, s, layer, where)
    a = w.acts.get(s.ptrs[GEMM_A], "bf16", k_in, f"{lab}.in")
    lm_head = k == len(names) - 1
    if lm_head and w.cut.every_row:
        a = _last_row_reader(w, s, where)
    if lm_head and w.cut.logits is not None:
        c = w.cut.logits
    else:
        c = w.acts.get(s.ptrs[GEMM_C], "bf16", n_out, f"{lab}.out")
    if lm_head:
        w.logits = c
    w.ops.append(Op("gemm", lab, s, args={"a": a, "w": Ref(buf=wname), "c": c,
                                           "n": n_out, "k": k_in}))


def _last_row_reader(w: Wiring, s: Site, where: str) -> Ref:
    """The lm_head input of a cut with ``every_row`` (``verify``): the final norm's whole
    output.  Asserted: the captured prefill lm_head GEMM reads A at that output's last row of
    the forward whose addresses the site holds (``(tokens - 1) * hidden`` bf16 elements in),
    i.e. it is the same tensor."""
    if w.final_norm is None:
        F.fail(where, "lm_head GEMM before the final norm (`model.norm`)")
    addr, ref = w.final_norm
    tokens = w.facts.group(w.group).tokens[0]
    if tokens is None:
        F.fail(where, "the forward's token count is unknown")
    F.same_address(s.ptrs.get(GEMM_A), addr + (int(tokens) - 1) * w.cfg.hidden * 2, where,
                   f"lm_head reads A at the last of the {tokens} rows of the final norm's "
                   f"output")
    return ref


# --- mined kernels ------------------------------------------------------------------------

def wire_norm(w: Wiring, s: Site) -> None:
    """RMSNorm with Inductor's fused residual adds: the weight pointer is the one the wiring
    names; every other pointer is an activation, the last one the normed output; each
    pointer's direction is Inductor's (``in_ptr`` read, ``out_ptr`` written, ``in_out_ptr``
    both: a residual sum stored for later layers is written without being read)."""
    k, where = w.enter(s, "norm")
    cfg, names = w.cfg, w.norm_names
    if k >= len(names):
        F.fail(where, f"RMSNorm #{k} beyond the {len(names)} the model has")
    wname = names[k]
    flat = s.flat_ptrs()
    wp = [p for p, a in flat if w.facts.tensor_at(a) and w.facts.tensor_at(a)[0] == "weight"]
    if len(wp) != 1:
        F.fail(where, f"expected exactly one weight pointer ({wname}), found {len(wp)}")
    F.weight_is(w.facts, s, (wp[0], 0), wname, where)
    F.scalars_are(s, [cfg.hidden] if w.decode else [TOK, cfg.hidden], where)
    F.eps_literal(w.facts, s, cfg.eps, where)
    lab = _label(wname)
    acts_p = [p for p, _ in flat if p != wp[0]]
    dirs = dict(zip((p for p, _ in flat), W.directions(w.facts, s, where)))
    if dirs[wp[0]] != "in" or dirs[acts_p[-1]] != "out":
        F.fail(where, f"Inductor's signature has the weight as {dirs[wp[0]]} and the normed "
                      f"output (last pointer) as {dirs[acts_p[-1]]}")
    ptrs = {wp[0]: ("in", Ref(buf=wname))}
    for p, a in flat:
        if p == wp[0]:
            continue
        d = dirs[p]
        ptrs[p] = (d, w.acts.get(a, "bf16", cfg.hidden,
                                 f"{lab}.out" if d == "out" else f"{lab}.res"))
        if d == "out" and k == len(names) - 1:
            w.final_norm = (a, ptrs[p][1])
    w.ops.append(Op("mined", lab, s, ptrs=ptrs))


def wire_qk_var(w: Wiring, s: Site) -> None:
    """Qwen3 prefill: ``mean(x^2)`` per (token, head) of q, then of k, each layer."""
    k, where = w.enter(s, "qk_var")
    layer, which = k // 2, "qk"[k % 2]
    b = bind(w, s, "qk_var", layer, where, {"x": which, "var": f"{which}_var"})
    F.same_address(b["x"][1], w.gemm_c.get(f"{layer}.{which}_proj"), where,
                   f"{which} variance reads {which} at the {which}_proj GEMM output")
    F.scalars_are(s, w.arch.scalars(w.cfg, "qk_var", w.decode, which), where)
    w.ops.append(_mined(f"L{layer}.{which}_var", s, b))


def wire_q_rope(w: Wiring, s: Site) -> None:
    """Rope on q (Qwen3: with the q norm; prefill: the ``cos`` half, in place): the roped q
    is the layer's attention input."""
    layer, where = w.enter(s, "q_rope", per_layer=True)
    b = bind(w, s, "q_rope", layer, where, {"q": "q", "q_io": "q", "norm_w": "q_norm",
                                            "var": "q_var", "sin": "q_sin", "out": "q_rot",
                                            "x": "q"})
    F.same_address(b["q" if "q" in b else "q_io"][1], w.gemm_c.get(f"{layer}.q_proj"),
                   where, "q rope reads q at the q_proj GEMM output (offset 0)")
    F.scalars_are(s, w.arch.scalars(w.cfg, "q_rope", w.decode), where)
    w.layer_q[layer] = (b["out" if "out" in b else "q_io"][3], s)
    w.ops.append(_mined(f"L{layer}.q_rope", s, b))


def wire_rope_sin(w: Wiring, s: Site) -> None:
    """Qwen3 prefill: the ``sin`` half of the q rope, then (same kernel name, 3-D grid) of the
    k rope, each into a temporary its ``cos`` half reads: the 2k-th site of a layer is q's,
    the (2k+1)-th k's (asserted: it reads the q_proj / k_proj output)."""
    k, where = w.enter(s, "rope_sin")
    layer, which = k // 2, "qk"[k % 2]
    where = s.where(w.program, f"rope_sin ({which}), layer {layer}")
    b = bind(w, s, "rope_sin", layer, where, {"x": which, "norm_w": f"{which}_norm",
                                              "var": f"{which}_var", "out": f"{which}_sin"})
    F.same_address(b["x"][1], w.gemm_c.get(f"{layer}.{which}_proj"), where,
                   f"the {which} rope's sin half reads {which} at the {which}_proj GEMM output")
    F.scalars_are(s, w.arch.scalars(w.cfg, "rope_sin", w.decode, which), where)
    w.ops.append(_mined(f"L{layer}.{which}_rope_sin", s, b))


def wire_k_rope_cache(w: Wiring, s: Site) -> None:
    """Rope on k fused with the K-cache write (Qwen3: with the k norm); in the dynamic graph
    the V-cache write is fused in too."""
    layer, where = w.enter(s, "k_rope_cache", per_layer=True)
    b = bind(w, s, "k_rope_cache", layer, where, {"k": "k", "v": "v", "norm_w": "k_norm",
                                                  "var": "k_var", "sin": "k_sin", "x": "k"})
    F.same_address(b["k"][1], w.gemm_c.get(f"{layer}.k_proj"), where,
                   "k rope reads k at the k_proj GEMM output (offset 0)")
    if "v" in b:
        F.same_address(b["v"][1], w.gemm_c.get(f"{layer}.v_proj"), where,
                       "the fused V-cache write reads v at the v_proj GEMM output (offset 0)")
    F.scalars_are(s, w.arch.scalars(w.cfg, "k_rope_cache", w.decode), where)
    _cache_writes(w, s, layer, {b[nm][0]: attr for nm, attr in
                                (("cache", "keys"), ("vcache", "values")) if nm in b}, where)
    w.ops.append(_mined(f"L{layer}.k_rope_cache", s, b))
    if "vcache" in b:
        w.last_cache_write = len(w.ops)


def _cache_writes(w: Wiring, s: Site, layer: int, caches: dict[int, str], where: str) -> None:
    """What every cache writer must hold: each cache pointer (param -> ``keys`` / ``values``)
    is this layer's sidecar cache tensor, laid out token-major, and the writer is
    capacity-free (:func:`.writers.check_writer`)."""
    for param, attr in caches.items():
        F.cache_layout(F.cache_is(w.facts, s, param, f"layers.{layer}.{attr}", where), w.kv,
                       where)
    W.check_writer(w.facts, s, w.kv, len(caches), where)


def wire_v_cache(w: Wiring, s: Site) -> None:
    """The V-cache write: (slots, v, this layer's V cache)."""
    layer, where = w.enter(s, "v_cache", per_layer=True)
    cfg = w.cfg
    flat = s.flat_ptrs()
    _count(flat, 3, where)
    F.same_address(flat[1][1], w.gemm_c.get(f"{layer}.v_proj"), where,
                   "V-cache write reads v at the v_proj GEMM output (offset 0)")
    F.slots_input(w.facts, s, flat[0][1], where)
    F.scalars_are(s, [cfg.kv_width] if w.decode else [mul(TOK, cfg.kv_width)], where)
    _cache_writes(w, s, layer, {flat[2][0]: "values"}, where)
    vin = w.acts.get(flat[1][1], "bf16", cfg.kv_width, f"L{layer}.v")
    w.ops.append(Op("mined", f"L{layer}.v_cache", s, ptrs={
        flat[0][0]: ("in", SLOTS), flat[1][0]: ("in", vin),
        flat[2][0]: ("inout", w.kv.v(layer))}))
    w.last_cache_write = len(w.ops)


def wire_silu(w: Wiring, s: Site) -> None:
    """SiLU(gate) * up, in place on gate."""
    layer, where = w.enter(s, "silu", per_layer=True)
    cfg = w.cfg
    flat = s.flat_ptrs()
    _count(flat, 2, where)
    F.same_address(flat[0][1], w.gemm_c.get(f"{layer}.gate_proj"), where,
                   "SiLU*mul reads gate at the gate_proj GEMM output")
    F.same_address(flat[1][1], w.gemm_c.get(f"{layer}.up_proj"), where,
                   "SiLU*mul reads up at the up_proj GEMM output")
    F.scalars_are(s, [cfg.intermediate] if w.decode else [mul(TOK, cfg.intermediate)],
                  where)
    w.ops.append(Op("mined", f"L{layer}.silu_mul", s, ptrs={
        flat[0][0]: ("inout", w.acts.get(flat[0][1], "bf16", cfg.intermediate,
                                         f"L{layer}.gate")),
        flat[1][0]: ("in", w.acts.get(flat[1][1], "bf16", cfg.intermediate,
                                      f"L{layer}.up"))}))


HANDLERS: dict[str, Handler] = {
    "drop": wire_drop, "splitk_reduce": wire_splitk_reduce,
    "attn_transpose": wire_attn_transpose, "embed": wire_embed,
    "rope_angles": wire_rope_angles, "argmax": wire_argmax, "gemm": wire_gemm,
    "norm": wire_norm, "qk_var": wire_qk_var, "q_rope": wire_q_rope,
    "rope_sin": wire_rope_sin, "k_rope_cache": wire_k_rope_cache,
    "v_cache": wire_v_cache, "silu": wire_silu,
}
"""Role (``Arch.role_of``) -> its handler."""
