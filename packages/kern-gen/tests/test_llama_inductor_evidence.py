"""The generator's reading of the captured graph, checked against Inductor's own generated code
for the same workload (``tests/fixtures/captures/smollm2-135m/inductor/inductor_code.log.xz``,
``TORCH_LOGS=output_code``; evidence only, nothing in kern is taken from it).

1. ABI: every replayed Triton kernel's parameter list in the manifest (pointer/scalar
   positions, pointer dtypes, directions, Triton's two trailing scratch pointers) matches the
   kernel's ``triton_meta`` signature in the log, and every scalar the manifest passes equals
   what Inductor's wrapper passes at the same position (evaluated for several token counts).
2. Layouts, in a small numpy model: the index expressions of the replayed rope / cache-write
   kernels are read from the log and evaluated; with the own rope angle kernel's layout
   (``out[i*tokens + t]``) and the own attention's strides from the manifest, q, K and V must
   arrive where the attention kernel reads them, equal to an independent HF-style RoPE
   (``x*cos + rotate_half(x)*sin``), for a prefill chunk starting at pos0 > 0 and for decode.
   The captured ``..._t_transpose_..._10`` kernel is shown to read a head-major tensor (the
   flex attention output) and write the token-major layout the own attention writes, and
   applying it to q (the old wiring) is shown to be wrong for tokens > 1.
"""

from __future__ import annotations

import json
import lzma
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from kern_gen.llama.arch import LLAMA_LAYOUT

ROOT = Path(__file__).resolve().parents[3]
LOG = ROOT / "tests/fixtures/captures/smollm2-135m/inductor/inductor_code.log.xz"
EXAMPLE = ROOT / "examples/smollm2-135m"
PTR_DT = {"bf16": "bf16", "fp32": "f32", "i64": "i64", "i32": "i32"}

pytestmark = pytest.mark.skipif(not LOG.exists(), reason="no Inductor log fixture")


# --- the log ---------------------------------------------------------------------------

@dataclass
class TK:
    name: str
    sig: list[tuple[str, str]]        # (param name, triton type), constexprs included
    body: list[str]


@dataclass
class Graph:
    gid: str
    kernels: dict[str, TK] = field(default_factory=dict)
    runs: dict[str, list[list[str]]] = field(default_factory=dict)
    assigns: dict[str, str] = field(default_factory=dict)


LINE = re.compile(r"^[VI]\d+ [\d:.]+ \d+ \S+\] \[([\w/]+)\] \[__output_code\] ?(.*)$")


def _split_args(s: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch in "([{"
        depth -= ch in ")]}"
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


@lru_cache(maxsize=1)
def graphs() -> dict[str, Graph]:
    per: dict[str, list[str]] = {}
    for line in lzma.open(LOG, "rt", encoding="utf-8", errors="replace"):
        m = LINE.match(line.rstrip("\n"))
        if m:
            per.setdefault(m.group(1), []).append(m.group(2))
    res = {}
    for gid, lines in per.items():
        g = Graph(gid)
        sig: list[tuple[str, str]] | None = None
        i = 0
        while i < len(lines):
            ln = lines[i]
            if "triton_meta={'signature': {" in ln:
                inner = ln.split("'signature': {", 1)[1].split("}", 1)[0]
                sig = re.findall(r"'(\w+)': '([^']+)'", inner)
            m = re.match(r"^def (triton_\w+)\(", ln)
            if m and sig is not None:
                j = i + 1
                while j < len(lines) and not lines[j].startswith("'''"):
                    j += 1
                g.kernels[m.group(1)] = TK(m.group(1), sig, lines[i + 1:j])
                sig, i = None, j
                continue
            m = re.match(r"^\s+(triton_\w+)\.run\((.*), stream=stream\d+\)$", ln)
            if m:
                g.runs.setdefault(m.group(1), []).append(_split_args(m.group(2)))
            m = re.match(r"^\s+(triton_\w+_xnumel) = (.+)$", ln)
            if m:
                g.assigns[m.group(1)] = m.group(2)
            i += 1
        res[gid] = g
    return res


# --- the manifest ----------------------------------------------------------------------

@lru_cache(maxsize=1)
def manifest() -> dict:
    """The example's programs as captured: generated with ``--no-fuse``, so that every mined
    kernel of the capture is replayed (the default fuses the decode rope kernels into an own
    one, :mod:`kern_gen.llama.fuse_rope`; the evidence here is about the mined ones)."""
    from kg_own import own_committed

    from kern_gen.llama.command import PRESETS
    from kern_gen.llama.pipeline import generate
    cap, cfg, _, _ = PRESETS["llama"]
    return json.loads(generate(ROOT / cap, ROOT / cfg, fuse=False,
                               own_cubins=own_committed(EXAMPLE)).manifest)


def _eval_m(v, tokens: int):
    if isinstance(v, int):
        return v
    (k, a), = v.items()
    if k == "sym":
        assert a == "tokens", v
        return tokens
    if k in ("i32", "i64", "f32"):
        return a
    if k == "expr":
        return _eval_m(a, tokens)
    if k == "mul":
        return _eval_m(a[0], tokens) * _eval_m(a[1], tokens)
    if k == "add":
        return _eval_m(a[0], tokens) + _eval_m(a[1], tokens)
    if k == "ceil_div":
        return -(-_eval_m(a[0], tokens) // _eval_m(a[1], tokens))
    raise AssertionError(f"unknown manifest value {v}")


def dispatches(program: str) -> list[dict]:
    return manifest()["programs"][program]["dispatches"]


def step_of(kernel: str, i: int = 0) -> dict:
    return manifest()["kernels"][kernel]["impl"]["steps"][i]


def mined(program: str) -> dict[str, tuple[dict, dict]]:
    """symbol -> (step, first dispatch) of every replayed Triton kernel of the program."""
    res = {}
    for d in dispatches(program):
        st = step_of(d["kernel"])
        if st["symbol"].startswith("triton_") and st["symbol"] not in res:
            res[st["symbol"]] = (st, d)
    return res


def graph_of(program: str) -> Graph:
    syms = set(mined(program))
    hits = [g for g in graphs().values() if syms <= set(g.kernels)]
    assert len(hits) == 1, (f"{program}: {len(hits)} Inductor graphs define all its mined "
                            f"kernels ({[g.gid for g in hits]}); expected exactly one")
    return hits[0]


def token_symbols(g: Graph) -> set[str]:
    """The graph's size symbols: the token count of input_ids / position_ids and the length
    of the capture's ``slots`` input (the token-major cache's write index), equal in every
    forward of the capture."""
    syms = {s for calls in g.runs.values() for args in calls for a in args
            for s in re.findall(r"\bs\d+\b", a)}
    assert len(syms) <= 2, f"graph {g.gid}: size symbols {syms}"
    return syms


def run_value(g: Graph, arg: str, tokens: int) -> int:
    env = {"math": math, **dict.fromkeys(token_symbols(g), tokens)}
    expr = g.assigns.get(arg, arg)
    return int(eval(expr, env))                                   # noqa: S307 (test evidence)


PROGRAMS = {"prefill": (7, 34, 85), "decode": (1,)}


# --- 1. ABI ------------------------------------------------------------------------------

def test_programs_map_to_distinct_graphs():
    assert graph_of("prefill").gid != graph_of("decode").gid
    assert token_symbols(graph_of("prefill"))                  # the dynamic (prefill) graph
    assert not token_symbols(graph_of("decode"))               # static, one token


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_replayed_kernel_abi_matches_inductor(program):
    g = graph_of(program)
    checked = 0
    for sym, (st, disp) in mined(program).items():
        tk = g.kernels[sym]
        sig = [(n, t) for n, t in tk.sig if t != "constexpr"]
        params, args = st["params"], st["args"]
        where = f"{program} {sym}"
        assert len(params) == len(sig) + 2, f"{where}: {params} vs {sig} (+2 scratch)"
        assert params[-2:] == ["i64", "i64"] and args[-2:] == [{"i64": 0}, {"i64": 0}], where
        for (n, t), p, a in zip(sig, params, args):
            if t.startswith("*"):
                d, kind = p.split(" ", 1)
                assert kind in ("ptr", f"buffer<{PTR_DT[t[1:]]}>"), f"{where} {n}: {p} vs {t}"
                ok = {"in_out_ptr": {"inout"}, "in_ptr": {"in", "inout"},
                      "out_ptr": {"out", "inout"}}[re.sub(r"\d+$", "", n)]
                assert d in ok, f"{where} {n}: direction {d}"
            else:
                assert p == t, f"{where} {n}: {p} vs {t}"
        # scalars: what the manifest passes == what Inductor's wrapper passes
        call = g.runs[sym][0]
        assert len(call) <= len(tk.sig)
        full = {n: (t, v) for (n, t), v in zip(tk.sig, call)}
        for k, ((n, t), a) in enumerate(zip(sig, args)):
            if t.startswith("*"):
                continue
            v = a if "arg" not in a else disp["args"][a["arg"]]
            for tokens in PROGRAMS[program]:
                assert _eval_m(v, tokens) == run_value(g, full[n][1], tokens), \
                    f"{where} scalar {n} (param {k}) at tokens={tokens}: {v} vs {full[n][1]}"
            checked += 1
    assert checked >= 8


# --- 2. layouts: numpy model of the captured index arithmetic ---------------------------

IDX_LINE = re.compile(r"^\s+([xyz]\d+) = ([\w\s()+*/%-]+)$")


def _access(tk: TK, op: str, ptr: str, n: int = 0) -> str:
    """The index expression of the n-th ``tl.<op>(ptr + (...)`` in the kernel body."""
    hits = []
    for ln in tk.body:
        for m in re.finditer(rf"tl\.{op}\({ptr} \+ \(", ln):
            i, depth = m.end(), 1
            while depth:
                depth += {"(": 1, ")": -1}.get(ln[i], 0)
                i += 1
            e = ln[m.end():i - 1]
            b = re.match(r"^tl\.broadcast_to\((.*), \[[^\]]*\]\)$", e)
            hits.append(b.group(1) if b else e)
    assert len(hits) > n, f"{tk.name}: no {op} #{n} of {ptr}"
    return hits[n]


def _grid_env(tk: TK, g: Graph, tokens: int) -> dict:
    call = g.runs[tk.name][0]
    numel = {n: run_value(g, v, tokens) for (n, t), v in zip(tk.sig, call)
             if n in ("xnumel", "ynumel", "znumel") and t != "constexpr"}
    for ln in tk.body:                       # literals baked into the body win
        m = re.match(r"^\s+([xyz]numel) = (\d+)$", ln)
        if m:
            numel[m.group(1)] = int(m.group(2))
    dims = [d for d in "zyx" if f"{d}numel" in numel]
    env = {"ks0": tokens}
    for k, d in enumerate(dims):
        shape = [1] * len(dims)
        shape[k] = numel[f"{d}numel"]
        env[f"{d}index"] = np.arange(numel[f"{d}numel"]).reshape(shape)
    for ln in tk.body:
        m = IDX_LINE.match(ln)
        if m and m.group(1)[0] in dims:
            env[m.group(1)] = eval(m.group(2), {}, env)           # noqa: S307
    return env


def _ev(expr: str, env: dict, **extra) -> np.ndarray:
    return np.asarray(eval(expr, {}, {**env, **extra}))          # noqa: S307


def _tmp_names(expr: str) -> list[str]:
    return sorted(set(re.findall(r"\btmp\d+\b", expr)))


def _ref_rope(x: np.ndarray, pos: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """HF: x*cos + rotate_half(x)*sin, x [..., tokens, D], angles pos ⊗ inv duplicated."""
    ang = pos[:, None].astype(np.float64) * inv[None, :]
    emb = np.concatenate([ang, ang], axis=-1)
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return x * np.cos(emb) + rot * np.sin(emb)


def _rope_kernel(tk: TK, env: dict, xin: np.ndarray, angles: np.ndarray, src: str,
                 ang_ptr: str, in_idx: np.ndarray, D: int) -> np.ndarray:
    """Value the kernel stores for each grid element: its loads, evaluated from the log
    (element, the rotate-half partners for the two halves, the angle), combined as RoPE."""
    d = in_idx % D
    lo = np.clip(_ev(_access(tk, "load", src, 1), env), 0, xin.size - 1)
    hi = np.clip(_ev(_access(tk, "load", src, 2), env), 0, xin.size - 1)
    partner = np.where(d < D // 2, -xin[lo], xin[hi])
    a = angles[_ev(_access(tk, "load", ang_ptr), env)]
    return xin[in_idx] * np.cos(a) + partner * np.sin(a)


def _by_role(program: str, role: str) -> tuple[TK, dict, dict]:
    g = graph_of(program)
    for d in dispatches(program):
        if d["label"] == f"L0.{role}":
            st = step_of(d["kernel"])
            return g.kernels[st["symbol"]], st, d
    raise AssertionError(f"{program}: no L0.{role} dispatch")


def _attn(program: str) -> tuple[dict, dict]:
    d = next(d for d in dispatches(program) if d["label"] == "L0.attn")
    return step_of(d["kernel"]), d


@pytest.mark.parametrize("program,tokens,pos0", [("prefill", 7, 5), ("prefill", 34, 0),
                                                 ("decode", 1, 11)])
def test_rope_and_cache_dataflow_reaches_the_own_attention(program, tokens, pos0):
    cfg = json.loads((EXAMPLE / "config.json").read_text())
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg["hidden_size"] // H
    T, half = tokens, D // 2
    rng = np.random.default_rng(tokens)
    pos = pos0 + np.arange(T)
    theta = cfg.get("rope_theta") or cfg["rope_parameters"]["rope_theta"]
    inv = 1.0 / theta ** (np.arange(half) * 2 / D)
    q = rng.standard_normal(T * H * D)        # q_proj / k_proj / v_proj GEMM outputs,
    k = rng.standard_normal(T * KV * D)       # row-major [tokens, n] (cuBLASLt C)
    v = rng.standard_normal(T * KV * D)
    # the own rope angle kernel's layout (ABI 3c): out[i*tokens + t] = positions[t]*inv[i]
    angles = np.empty(half * T)
    for i in range(half):
        angles[i * T:(i + 1) * T] = pos * inv[i]

    # manifest: the angle dispatch passes `tokens` as the row length the rope kernels use
    ad = next(d for d in dispatches(program) if d["kernel"].startswith("rope_angles"))
    ast = step_of(ad["kernel"])
    assert _eval_m(ad["args"][3], T) == T and ast["args"][4] == {"i32": half}

    # --- q rope ---
    tk, st, disp = _by_role(program, "q_rope")
    env = _grid_env(tk, graph_of(program), T)
    ptrs = [(n, t) for n, t in tk.sig if t.startswith("*")]
    src, ang_ptr, dst = (ptrs[0][0], next(n for n, t in ptrs if t == "*fp32"), ptrs[-1][0])
    in_idx = _ev(_access(tk, "load", src), env)
    assert sorted(in_idx.ravel()) == list(range(T * H * D))
    val = _rope_kernel(tk, env, q, angles, src, ang_ptr, in_idx, D)
    q_rot = np.full(T * H * D, np.nan)
    q_rot[_ev(_access(tk, "store", dst), env)] = val
    q_ref = _ref_rope(q.reshape(T, H, D).transpose(1, 0, 2), pos, inv)      # [H, T, D]

    ast, adisp = _attn(program)
    qbuf = disp["args"][[n for n, _ in tk.sig].index(dst)]
    assert adisp["args"][0] == qbuf, "the own attention reads q where q rope wrote it"
    # ABI.md 3a″/3b: decode's cluster kernel (q, k, v, kv_lens, block_table, out,
    # q_row_stride, 4 strides, ...; this capture is generated unfused, so no rope is folded
    # into it); prefill (q, k, v, pos0, block_table, out, q_row_stride, 4 strides, ...)
    qrs = ast["args"][6]["i32"]
    t_, h_, d_ = np.meshgrid(np.arange(T), np.arange(H), np.arange(D), indexing="ij")
    got = q_rot[t_ * qrs + h_ * D + d_].transpose(1, 0, 2)
    np.testing.assert_allclose(got, q_ref, rtol=1e-12, atol=1e-12)

    # --- K: k rope fused with the cache write; V: its own writer (decode) or fused into the
    # K writer (prefill); every row t is stored at the slot the kernel loads from `slots[t]`,
    # here scattered over a pool (a paged engine's pages), not the positions
    slots = rng.permutation(64 * T)[:T] + 3
    kst, kh, vst, vh = (ast["args"][i]["i64"] for i in range(7, 11))
    tk, st, disp = _by_role(program, "k_rope_cache")
    names = dict(zip(LLAMA_LAYOUT[("k_rope_cache", program == "decode")],
                     (n for n, t in tk.sig if t.startswith("*"))))
    writes = [(tk, disp, names["k"], names["cache"], names["slots"], k, True)]
    if "vcache" in names:
        writes.append((tk, disp, names["v"], names["vcache"], names["slots"], v, False))
    else:
        vtk, _, vdisp = _by_role(program, "v_cache")
        vp = [n for n, t in vtk.sig if t.startswith("*")]
        writes.append((vtk, vdisp, vp[1], vp[2], vp[0], v, False))
    for tk, disp, src, cache_ptr, slot_ptr, x, is_k in writes:
        role = "K" if is_k else "V"
        env = _grid_env(tk, graph_of(program), T)
        pnames = [n for n, _ in tk.sig]
        assert dict(tk.sig)[slot_ptr] == "*i64"
        assert disp["args"][pnames.index(slot_ptr)] == {"buf": "slots"}
        cache_arg = disp["args"][pnames.index(cache_ptr)]
        assert cache_arg == adisp["args"][1 if is_k else 2], f"{program} {role}: cache base"
        in_idx = _ev(_access(tk, "load", src), env)
        t_of = in_idx // (KV * D)
        row = np.broadcast_to(_ev(_access(tk, "load", slot_ptr), env), in_idx.shape)
        assert (row == t_of).all(), f"{program} {role}: row t loads slots[t]"
        store = _access(tk, "store", cache_ptr)
        tmps = _tmp_names(store)
        assert len(tmps) == 1, store              # the slot loaded for the row
        slot_idx = np.broadcast_to(_ev(store, env, **{tmps[0]: slots[row]}), in_idx.shape)
        if is_k:
            ptrs = [(n, t) for n, t in tk.sig if t.startswith("*")]
            ang_ptr = next(n for n, t in ptrs if t == "*fp32")
            val = _rope_kernel(tk, env, x, angles, src, ang_ptr, in_idx, D)
            ref = _ref_rope(x.reshape(T, KV, D).transpose(1, 0, 2), pos, inv)
        else:
            val = x[in_idx]
            ref = x.reshape(T, KV, D).transpose(1, 0, 2)
        cache = np.full((int(slots.max()) + 1) * KV * D, np.nan)
        cache[slot_idx.ravel()] = np.broadcast_to(val, in_idx.shape).ravel()
        assert np.isnan(cache).sum() == cache.size - T * KV * D, "stores outside the slots"
        s_, h_, d_ = np.meshgrid(slots, np.arange(KV), np.arange(D), indexing="ij")
        got = cache[s_ * (kst if is_k else vst) + h_ * (kh if is_k else vh) + d_]
        np.testing.assert_allclose(got.transpose(1, 0, 2), ref, rtol=1e-12, atol=1e-12,
                                   err_msg=f"{program} {role}")


def _transpose_kernel() -> TK:
    g = graph_of("prefill")
    hits = [tk for n, tk in g.kernels.items() if "flex_attention_mm" in n and
            n.startswith("triton_poi")]
    assert len(hits) == 1
    return hits[0]


def test_captured_transpose_is_the_attention_output_head_to_token_major():
    """It reads [heads, tokens, D] (the flex output) and writes [tokens, heads*D]: the layout
    the own attention writes (ABI 3: out [T, n_q_heads, D] contiguous), so it is replaced."""
    tk = _transpose_kernel()
    g = graph_of("prefill")
    for T in (7, 34):
        env = _grid_env(tk, g, T)
        src, dst = [n for n, t in tk.sig if t.startswith("*")]
        li, si = _ev(_access(tk, "load", src), env), _ev(_access(tk, "store", dst), env)
        h, t, d = li // (64 * T), (li // 64) % T, li % 64
        assert np.array_equal(si, t * 576 + h * 64 + d)
        assert not np.array_equal(li, si)       # a real permutation for tokens > 1


def test_replaying_the_transpose_on_q_would_scramble_it():
    """The old wiring (q rope output -> captured transpose -> attention as token-major q) is
    wrong for tokens > 1: q rope's output is token-major already."""
    tk = _transpose_kernel()
    g = graph_of("prefill")
    T = 7
    env = _grid_env(tk, g, T)
    src, dst = [n for n, t in tk.sig if t.startswith("*")]
    q_tok = np.arange(T * 576, dtype=np.float64)      # token-major q (value = its index)
    out = np.empty_like(q_tok)
    out[_ev(_access(tk, "store", dst), env)] = q_tok[_ev(_access(tk, "load", src), env)]
    assert not np.array_equal(out, q_tok)
    assert not any(step_of(d["kernel"])["symbol"] == tk.name for d in dispatches("prefill"))
