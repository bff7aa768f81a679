"""Fused GEMVs: fewer launches in the few-row programs (``--gemm gemv``, ``--fuse``, default on).

Why: a decode or verify step of these models is bound by launches, not bytes (issue 16: SmolLM2
~1.9 µs per kernel over 335-404 dispatches).  Two fusions replace captured kernels and GEMMs
by one launch of an own kernel (``kernels/gemv.cu``, ABI.md 4a/4b); both compute every dot
product exactly as the plain GEMV of the same block size does:

- **SiLU·mul into gate/up** (``gemm_silu``): the captured ``silu_mul`` kernel (SiLU(gate) · up,
  in place on gate) and the GEMM(s) that produced its two operands become one
  ``kern_gemv_silu_bf16`` over the merged ``[gate; up]`` rows, writing the product where the
  captured kernel wrote it.  ``decode``: one merged GEMM + the kernel -> 1 launch; the dynamic
  programs (``verify``, ``draft``): two GEMMs on weight views + the kernel -> 1.
- **q/k/v in one launch** (``gemm_split``): three GEMMs of one input on contiguous weight
  views (the dynamic programs' unmerged q/k/v: their captured readers need ``[rows, n_part]``
  outputs of their own) become one ``kern_gemv_split3_bf16`` writing each part's buffer.

Each fusion is proved on the IR before it is made (:class:`~.errors.WiringError` otherwise):
the operands are the producers' outputs exactly, the weight parts are contiguous rows of one
buffer, nothing between the fused ops reads, clobbers or re-uses the buffers involved, and
nobody reads the dropped intermediate (the up half) afterwards; the program's dataflow is
checked again at the end.  A chain whose parts break the kernel's 16-column rule is left
unfused (reported by the counts in the README).
"""

from __future__ import annotations

from dataclasses import replace

from .errors import WiringError
from .gemm import GEMV_COLS
from .ir import Op, Program, Ref, check_dataflow, op_where, reads, used_buffers, writes

SILU_LABEL = "silu_mul"


def fuse_program(prog: Program) -> Program:
    """``prog`` with both fusions applied wherever their preconditions hold."""
    ops = _fuse_silu(prog, list(prog.ops))
    ops = _fuse_split(prog.name, ops)
    check_dataflow(prog.name, ops)
    used = used_buffers(ops)
    return replace(prog, ops=ops, bufs={k: b for k, b in prog.bufs.items() if k in used})


def _writes_buf(op: Op, buf: str | None) -> bool:
    return buf is not None and buf in [r.buf for _, r in writes(op)]


def _touches(op: Op, buf: str | None) -> bool:
    return _writes_buf(op, buf) or (buf is not None and buf in [r.buf for r in reads(op)])


def _producer(ops: list[Op], j: int, ref: Ref, where: str) -> int:
    """Index of the last op before ``j`` that writes ``ref``'s buffer: a GEMM, or refused."""
    for t in range(j - 1, -1, -1):
        if _writes_buf(ops[t], ref.buf):
            if ops[t].kind != "gemm":
                raise WiringError(f"{where}: `{ref.buf}` was last written by "
                                  f"`{ops[t].label}` ({ops[t].kind}), not by a GEMM")
            return t
    raise WiringError(f"{where}: nothing before it writes `{ref.buf}`")


def _silu_operands(op: Op, where: str) -> tuple[Ref, Ref]:
    """(gate, up) of a captured SiLU·mul: the in-place operand and the read-only one."""
    gate = [r for d, r in op.ptrs.values() if d == "inout"]
    up = [r for d, r in op.ptrs.values() if d == "in"]
    if len(gate) != 1 or len(up) != 1 or len(op.ptrs) != 2:
        raise WiringError(f"{where}: expected one in-place (gate) and one read-only (up) "
                          f"pointer, found {sorted(d for d, _ in op.ptrs.values())}")
    return gate[0], up[0]


def _fuse_silu(prog: Program, ops: list[Op]) -> list[Op]:
    j = 0
    while j < len(ops):
        s = ops[j]
        if s.kind == "mined" and s.label.split(".")[-1] == SILU_LABEL:
            ops, j = _fuse_one_silu(prog, ops, j)
        j += 1
    return ops


def _fuse_one_silu(prog: Program, ops: list[Op], j: int) -> tuple[list[Op], int]:
    s = ops[j]
    where = op_where(prog.name, s)
    gate, up = _silu_operands(s, where)
    tg, tu = _producer(ops, j, gate, where), _producer(ops, j, up, where)
    pg, pu = ops[tg], ops[tu]
    k = pg.args["k"]
    if tg == tu:          # one merged GEMM: [gate | up] in one row (one-row programs only)
        n = pg.args["n"] // 2
        c = pg.args["c"]
        if prog.rows != 1 or pg.args["n"] % 2:
            raise WiringError(f"{where}: gate and up come from one GEMM `{pg.label}` in a "
                              f"program of {prog.rows} rows (a merged output has the row "
                              f"stride 2n, the captured kernel reads n)")
        if gate != c or up != Ref(buf=c.buf, offset=c.offset + 2 * n):
            raise WiringError(f"{where}: gate/up at {gate}/{up} are not the two halves of "
                              f"`{pg.label}`'s output {c}")
        w = pg.args["w"]
        first = tg
    else:
        n = pg.args["n"]
        if pg.args["c"] != gate or pu.args["c"] != up:
            raise WiringError(f"{where}: gate/up are not exactly the outputs of `{pg.label}` "
                              f"/ `{pu.label}`")
        same = (pu.args["a"] == pg.args["a"] and pu.args["k"] == k and pu.args["n"] == n
                and pu.args.get("rows") == pg.args.get("rows"))
        w, wu = pg.args["w"], pu.args["w"]
        if not same or wu != Ref(buf=w.buf, offset=w.offset + 2 * n * k):
            raise WiringError(f"{where}: `{pg.label}` and `{pu.label}` do not read one input "
                              f"and contiguous rows [gate; up] of one weight (gate {w}, up "
                              f"{wu}, n {n}, k {k})")
        first = min(tg, tu)
    a = pg.args["a"]
    for t in range(first + 1, j):
        if t in (tg, tu):
            continue
        o = ops[t]
        if _touches(o, gate.buf) or _touches(o, up.buf) or _writes_buf(o, a.buf):
            raise WiringError(f"{where}: `{o.label}` between the gate/up GEMMs and the SiLU "
                              f"touches `{gate.buf}`, `{up.buf}` or overwrites the input "
                              f"`{a.buf}`")
    _up_unread_after(prog.name, ops, j, gate, up, where)
    args = {"a": a, "w": w, "c": gate, "n": n, "k": k}
    if "rows" in pg.args:
        args["rows"] = pg.args["rows"]
    label = s.label[: -len(SILU_LABEL)] + "mlp.gate_up_silu"
    fused = Op("gemm_silu", label, pg.site, args=args)
    out = [o for t, o in enumerate(ops) if t not in (tg, tu, j)]
    at = j - (2 if tg != tu else 1)
    out.insert(at, fused)
    return out, at


def _up_unread_after(program: str, ops: list[Op], j: int, gate: Ref, up: Ref,
                     where: str) -> None:
    """After the SiLU, nobody reads the up operand (it is no longer computed) until its
    buffer is written anew."""
    for o in ops[j + 1:]:
        if any(r.buf == up.buf and (up.buf != gate.buf or r.offset == up.offset)
               for r in reads(o)):
            raise WiringError(f"{where}: `{o.label}` reads the up projection `{up.buf}` after "
                              f"the SiLU·mul; it cannot be fused away")
        if any(d == "out" and r.buf == up.buf for d, r in writes(o)):
            return


def _fuse_split(program: str, ops: list[Op]) -> list[Op]:
    j = 0
    while j < len(ops):
        chain = _chain(ops, j)
        if chain is not None:
            ops = _fuse_chain(program, ops, chain)
        j += 1
    return ops


def _chain(ops: list[Op], j: int) -> list[int] | None:
    """Indices of three GEMMs from ``j`` on with one input and contiguous views of one weight
    (the q/k/v of a dynamic program), or None.  The search stops where the input changes."""
    p = ops[j]
    if p.kind != "gemm":
        return None
    a, w, k, rows = p.args["a"], p.args["w"], p.args["k"], p.args.get("rows")
    chain, nxt = [j], w.offset + 2 * p.args["n"] * k
    for t in range(j + 1, len(ops)):
        o = ops[t]
        if (o.kind == "gemm" and o.args["a"] == a and o.args["k"] == k
                and o.args.get("rows") == rows and o.args["w"] == Ref(buf=w.buf, offset=nxt)):
            chain.append(t)
            nxt += 2 * o.args["n"] * k
            if len(chain) == 3:
                break
        if _writes_buf(o, a.buf):
            break
    if len(chain) != 3:
        return None
    n0, n1 = (ops[t].args["n"] for t in chain[:2])
    # kern_gemv_split3_bf16: parts 0 and 1 are whole blocks of GEMV_COLS columns
    return chain if n0 % GEMV_COLS == 0 and n1 % GEMV_COLS == 0 else None


def _fuse_chain(program: str, ops: list[Op], chain: list[int]) -> list[Op]:
    parts = [ops[t] for t in chain]
    where = op_where(program, parts[0])
    outs = [p.args["c"] for p in parts]
    if len({c.buf for c in outs}) != 3:
        raise WiringError(f"{where}: the q/k/v GEMMs {[p.label for p in parts]} write "
                          f"overlapping buffers {[c.buf for c in outs]}")
    # parts 1 and 2 move up to part 0's place: nothing they pass may touch their outputs
    for i in (1, 2):
        for t in range(chain[0] + 1, chain[i]):
            o = ops[t]
            if t not in chain and _touches(o, outs[i].buf):
                raise WiringError(f"{where}: `{o.label}` between the q/k/v GEMMs touches "
                                  f"`{outs[i].buf}`, the output of `{parts[i].label}`; it "
                                  f"cannot move into one launch")
    p0 = parts[0]
    args = {"a": p0.args["a"], "w": p0.args["w"], "c0": outs[0], "c1": outs[1],
            "c2": outs[2], "n0": parts[0].args["n"], "n1": parts[1].args["n"],
            "n2": parts[2].args["n"], "k": p0.args["k"]}
    if "rows" in p0.args:
        args["rows"] = p0.args["rows"]
    label = p0.label.rsplit(".", 1)[0] + ".qkv_split"
    fused = Op("gemm_split", label, p0.site, args=args)
    return [fused if t == chain[0] else o for t, o in enumerate(ops) if t not in chain[1:]]
