"""kern-gen dspark on the committed captures (docs/dspark.md): a tiny draft (1 layer, block 3,
Markov rank 8) generates for both families and verifies clean; the taps read exactly the
residual state after each tap layer (an independent symbolic replay of Inductor's residual
bookkeeping); the draft programs run the target's captured kernels on the draft's weights and
KV; each new wiring assertion refuses an altered fact."""

from __future__ import annotations

from dataclasses import replace
import json
from pathlib import Path

import kern_manifest
import pytest
from kg_own import assert_same_output, own_committed, wiring_inputs

from kern_gen.dspark import draft as D
from kern_gen.dspark import spec as S
from kern_gen.dspark import taps as T
from kern_gen.dspark.generate import DSpark
from kern_gen.dspark.programs import ORDER, build
from kern_gen.llama import WiringError, generate
from kern_gen.llama import config as C
from kern_gen.llama.command import PRESETS
from kern_gen.llama.ir import CARRY, TOKEN_IDS, Op, Ref, is_weight, reads, writes
from kern_gen.llama.kv import KVLayout

ROOT = Path(__file__).resolve().parents[3]
NAMES = [p for p in ("llama", "qwen3") if (ROOT / PRESETS[p][0]).is_dir()]


def tiny(cfg: C.ModelConfig, **kw) -> S.DraftSpec:
    L = cfg.layers
    base = dict(family=cfg.model_type, target_layers=L, layers=1, block=3,
                tap_layers=tuple(1 + (i * (L - 4)) // 4 for i in range(5)), markov_rank=8,
                mask_token_id=0)
    return S.DraftSpec(**{**base, **kw})


@pytest.fixture(scope="module", params=NAMES)
def target(request, tmp_path_factory):
    cap, cfg_path, out = (ROOT / p for p in PRESETS[request.param][:3])
    mined, cfg, g = wiring_inputs(request.param, tmp_path_factory.mktemp("mined"))
    out = out.with_name(out.name + "-dspark")    # its own cubins include accept.cubin
    return dict(name=request.param, cap=cap, cfg_path=cfg_path, out=out, mined=mined, g=g,
                cfg=cfg, progs={p.name: p for p in build(g, tiny(cfg))})


def test_tiny_draft_generates_and_verifies_clean(target):
    cfg = target["cfg"]
    r = generate(target["cap"], target["cfg_path"], mined=target["mined"],
                 own_cubins=own_committed(target["out"]), extension=DSpark(tiny(cfg)))
    man = kern_manifest.from_obj(__import__("json").loads(r.manifest))
    assert kern_manifest.verify(man) == []
    assert list(man.programs) == list(ORDER)
    assert set(man.states) - set(KVLayout.of(cfg, 1).states()) == {
        "draft.kv.L0.k", "draft.kv.L0.v"}
    bufs = man.buffers
    assert bufs["draft_tokens"].shape == [3] and bufs["draft_tokens"].cls == "output"
    assert bufs["carry"].shape == ["tokens", cfg.hidden] and bufs["carry"].cls == "carry"
    assert "## DSpark draft" in r.readme.decode()


def test_verify_ends_with_the_in_graph_acceptance(target):
    """The last dispatch of verify is the own acceptance step on verify's own rows, its
    outputs the contract's ``next.*`` of [B] / [B + 1], the mask token its one i64 literal,
    as ``check_dspark`` reads it back; an op naming another output is refused."""
    from kern_manifest.contract import NEXT_INPUTS, check_dspark
    from kern_gen.dspark.draft import accepting
    from kern_gen.llama.errors import WiringError
    cfg = target["cfg"]
    spec = tiny(cfg, mask_token_id=11)
    r = generate(target["cap"], target["cfg_path"], mined=target["mined"],
                 own_cubins=own_committed(target["out"]), extension=DSpark(spec))
    doc = json.loads(r.manifest)
    last = doc["programs"]["verify"]["dispatches"][-1]
    assert last["label"] == "accept" and last["args"][:3] == [
        {"buf": "token_ids"}, {"buf": "predictions"}, {"buf": "positions"}]
    assert last["args"][3:7] == [{"buf": n} for n in NEXT_INPUTS]
    assert last["args"][7:] == [{"sym": "tokens"}, {"i32": 3}, {"i64": 11}]
    step = doc["kernels"][last["kernel"]]["impl"]["steps"][0]
    assert (step["symbol"], step["cubin"], step["pdl"]) == ("kern_spec_accept", "accept.cubin",
                                                            True)
    for n, (dtype, extra) in NEXT_INPUTS.items():
        assert doc["buffers"][n] == {"dtype": dtype, "shape": [3 + extra], "class": "output"}
    assert check_dspark(kern_manifest.from_obj(doc)).accept_mask == 11
    progs = build(target["g"], spec)
    v = next(p for p in progs if p.name == "verify")
    assert v.ops[-1].kind == "accept" and accepting(v, spec).ops[-2:] == [v.ops[-1]] * 2
    bad = replace(v.ops[-1], args={**v.ops[-1].args, "next_pos": v.ops[-1].args["next_ids"]})
    swapped = [replace(p, ops=p.ops[:-1] + [bad]) if p is v else p for p in progs]
    with pytest.raises(WiringError, match="`next_pos` is `next.token_ids`"):
        generate(target["cap"], target["cfg_path"], mined=target["mined"],
                 own_cubins=own_committed(target["out"]), extension=_Programs(spec, swapped))


class _Programs(DSpark):
    """The DSpark extension with given programs (a falsification's altered ones)."""

    def __init__(self, spec, progs) -> None:
        super().__init__(spec)
        object.__setattr__(self, "progs", progs)

    def programs(self, g):
        return self.progs


def test_gemm_acc_gemv_swaps_only_the_few_row_accumulating_gemms(target):
    """``--gemm-acc gemv`` (the default): the taps of decode_spec / verify run the own
    kern_gemv_acc_bf16 (the extern's interface, one kernel per program and shape);
    every dispatch is otherwise the same, prefill's taps stay cuBLASLt; verifies clean."""
    import json
    from kern_gen.llama.gemm import ACC_PARAMS, ACC_SYMBOL, gemv_warps
    kw = dict(mined=target["mined"], own_cubins=own_committed(target["out"]))
    spec = tiny(target["cfg"])
    docs = [json.loads(generate(target["cap"], target["cfg_path"], extension=DSpark(spec),
                                gemm_acc=acc, **kw).manifest) for acc in ("cublaslt", "gemv")]
    plain, acc = docs
    assert kern_manifest.verify(kern_manifest.from_obj(acc)) == []
    swapped = 0
    for prog in ORDER:
        for x, y in zip(plain["programs"][prog]["dispatches"],
                        acc["programs"][prog]["dispatches"], strict=True):
            if x == y:
                continue
            assert x["kernel"] == "gemm_acc" and x["args"] == y["args"], (prog, x["label"])
            assert prog in ("decode_spec", "verify")
            n, k = x["args"][4]["i32"], x["args"][5]["i32"]
            assert y["kernel"] == f"{prog}.gemm_acc.{n}x{k}"
            kern = acc["kernels"][y["kernel"]]
            (st,) = kern["impl"]["steps"]
            assert kern["params"] == ACC_PARAMS and st["symbol"] == ACC_SYMBOL
            assert st["block"] == [32 * gemv_warps(n, k), 1, 1] and st["cubin"] == "gemv.cubin"
            swapped += 1
    assert swapped and any(d["kernel"] == "gemm_acc"
                           for d in acc["programs"]["prefill"]["dispatches"])
    with pytest.raises(WiringError, match=r"--gemm-acc `fast`: choose one of cublaslt, gemv"):
        generate(target["cap"], target["cfg_path"], extension=DSpark(spec), gemm_acc="fast",
                 **kw)


def _terms(progs, name: str, cfg) -> dict[int, list[frozenset]]:
    """Symbolic replay of a tapped program: each buffer holds the set of residual terms it
    sums (``e`` the embedding, ``a<j>`` / ``m<j>`` layer j's o_proj / down_proj output); a
    fused norm stores the union of its activation inputs into its in_out pointer. Returns,
    per tap index, the term sets of the buffers its GEMMs read."""
    held: dict[str, frozenset] = {}
    out: dict[int, list[frozenset]] = {}
    for o in progs[name].ops:
        if o.kind == "embedding":
            held[o.args["out"].buf] = frozenset({"e"})
        elif o.kind in ("gemm", "gemm_acc") and o.label.startswith("tap"):
            out.setdefault(int(o.label[3]), []).append(held[o.args["a"].buf])
        elif o.kind == "gemm" and o.label.endswith(("o_proj", "down_proj")):
            j = o.label.split(".")[0][1:]
            held[o.args["c"].buf] = frozenset({("a" if "o_proj" in o.label else "m") + j})
        elif o.kind == "mined" and o.label.endswith("layernorm"):
            acts = [(d, r.buf) for d, r in o.ptrs.values() if not is_weight(r.buf)]
            total = frozenset().union(*(held.get(b, frozenset()) for d, b in acts
                                        if d in ("in", "inout")))
            for d, b in acts:
                if d == "inout":
                    held[b] = total
                elif d == "out":
                    held[b] = frozenset()      # normed: no longer a residual term
        else:
            for _, r in writes(o):
                if r.buf in held and r.buf != CARRY.buf:
                    held[r.buf] = frozenset()
    return out


@pytest.mark.parametrize("program", ["prefill", "decode_spec", "verify"])
def test_taps_read_exactly_the_state_after_each_tap_layer(target, program):
    spec = tiny(target["cfg"])
    got = _terms(target["progs"], program, target["cfg"])
    for i, layer in enumerate(spec.tap_layers):
        want = {"e"} | {f"{x}{j}" for j in range(layer + 1) for x in "am"}
        parts = got[i]
        assert frozenset().union(*parts) == want, (program, i)
        assert sum(len(p) for p in parts) == len(want), (program, i, "a term counted twice")
    kinds = [o.kind for o in target["progs"][program].ops if o.label.startswith("tap")]
    assert kinds[0] == "gemm" and set(kinds[1:]) == {"gemm_acc"}


def test_draft_runs_target_layers_on_draft_weights_and_kv(target):
    cfg, progs = target["cfg"], target["progs"]
    dr = progs["draft"]
    shared = {"model.embed_tokens.weight", "lm_head.weight", "model.rotary_emb.inv_freq"}
    for o in dr.ops:
        for r in reads(o) + [r for _, r in writes(o)]:
            if r.state:
                assert r.state.startswith("draft.kv.L0."), o.label
            elif is_weight(r.buf):
                assert r.buf.startswith("draft.") or r.buf in shared, (o.label, r.buf)
    labels = [o.label for o in dr.ops]
    verify = [o.label for o in progs["verify"].ops]
    cut = labels.index("norm")
    assert labels[:cut] == verify[:cut]           # the captured layer-0 ops, in order
    assert labels[cut + 1:] == ["lm_head"] + [f"markov{t}" for t in range(3)]
    steps = dr.ops[cut + 2:]                      # one own step kernel each, chained by prev
    assert all(o.kind == "markov" and o.args["rank"] == 8 for o in steps)
    assert [o.args["prev"] for o in steps] == [TOKEN_IDS] + [o.args["out"] for o in steps[:-1]]
    assert [o.args["logits"].offset for o in steps] == [t * cfg.vocab * 2 for t in range(3)]
    assert dr.ops[cut].site == progs["verify"].ops[cut].site      # layer 1's input norm
    assert "draft.norm.weight" in [r.buf for r in reads(dr.ops[cut])]


def test_precompute_writes_only_the_draft_kv_from_carry(target):
    pc = target["progs"]["draft_precompute"]
    states = {r.state for o in pc.ops for _, r in writes(o) if r.state}
    assert states == {"draft.kv.L0.k", "draft.kv.L0.v"}
    assert CARRY.buf in [r.buf for r in reads(pc.ops[0])]
    assert not any(o.kind == "attention" for o in pc.ops)
    assert all(o.args["a"].buf == "draft_precompute.ctx" for o in pc.ops if o.kind == "gemm")


# --- refusals ---------------------------------------------------------------------------

@pytest.mark.parametrize("change, needle", [
    (dict(family="qwen2"), "`family`"), (dict(target_layers=3), "`target_layers`"),
    (dict(layers=0), "`layers`"), (dict(layers=10_000), "`layers`"),
    (dict(block=1), "`block`"), (dict(block=16), "`block`"),
    (dict(tap_layers=(1, 1, 2, 3, 4)), "`tap_layers`"),
    (dict(tap_layers=(1, 2, 3, 4, 10_000)), "`tap_layers`"),
    (dict(markov_rank=12), "`markov_rank`"), (dict(mask_token_id=-1), "`mask_token_id`"),
])
def test_spec_check_refuses(target, change, needle):
    with pytest.raises(WiringError, match=needle):
        S.check(tiny(target["cfg"], **change), target["cfg"])


@pytest.mark.parametrize("doc, needle", [
    ('[1]', "JSON object"), ('{"format": "x", "version": 1}', "format"),
    ('not json', "readable JSON"),
])
def test_spec_load_refuses(tmp_path, doc, needle):
    p = tmp_path / "dspark.json"
    p.write_text(doc)
    with pytest.raises(WiringError, match=needle):
        S.load(p)


def test_spec_load_names_missing_and_mistyped_keys(tmp_path):
    p = tmp_path / "dspark.json"
    base = dict(format="kern-dspark", version=1, family="llama", target_layers=30, layers=1,
                block=7, tap_layers=[1, 7, 14, 20, 27], markov_rank=64, mask_token_id=0)
    import json
    for key, bad, needle in (("layers", None, "`layers` is missing"),
                             ("block", "7", "`block` must be an integer"),
                             ("tap_layers", [1, 2], "5 integers")):
        doc = {**base, key: bad} if bad is not None else {k: v for k, v in base.items()
                                                          if k != key}
        p.write_text(json.dumps(doc))
        with pytest.raises(WiringError, match=needle):
            S.load(p)
    with pytest.raises(WiringError, match="no such file"):
        S.load(tmp_path / "absent.json")


def test_taps_refuse_a_norm_with_two_in_out_sums(target):
    prog = target["progs"]["verify"]
    k = T.tap_norm(prog, 1)
    o = prog.ops[k]
    acts = [p for p, (d, r) in o.ptrs.items() if not is_weight(r.buf) and d == "in"]
    bad = replace(o, ptrs={**o.ptrs, **{p: ("inout", o.ptrs[p][1]) for p in acts[:2]}})
    with pytest.raises(WiringError, match=r"\d in_out activations"):
        T.summands(prog, bad)
    none = replace(o, ptrs={p: v for p, v in o.ptrs.items() if is_weight(v[1].buf)})
    with pytest.raises(WiringError, match="reads no activation"):
        T.summands(prog, none)


def test_taps_refuse_a_missing_tap_norm(target):
    prog = target["progs"]["verify"]
    layer = tiny(target["cfg"]).tap_layers[1]
    k = T.tap_norm(prog, layer)
    gone = replace(prog, ops=prog.ops[:k] + prog.ops[k + 1:])
    with pytest.raises(WiringError, match=f"0 ops `L{layer + 1}.input_layernorm`"):
        T.add_taps(gone, tiny(target["cfg"]), target["cfg"])


def _patched_wire(monkeypatch, edit):
    real = D.wire

    def fake(g, cut):
        w = real(g, cut)
        edit(w)
        return w
    monkeypatch.setattr(D, "wire", fake)


def test_draft_refuses_a_final_norm_with_two_outputs(target, monkeypatch):
    def edit(w):
        k = D._index(w, "L1.input_layernorm")
        o = w.ops[k]
        p_in = [p for p, (d, r) in o.ptrs.items() if d == "in" and not is_weight(r.buf)][0]
        w.ops[k] = replace(o, ptrs={**o.ptrs, p_in: ("out", o.ptrs[p_in][1])})
    _patched_wire(monkeypatch, edit)
    with pytest.raises(WiringError, match="writes 2 outputs"):
        D.draft(target["g"], tiny(target["cfg"]))


def test_precompute_refuses_a_layer0_norm_that_adds(target, monkeypatch):
    def edit(w):
        k = D._index(w, "L0.input_layernorm")
        o = w.ops[k]
        w.ops[k] = replace(o, ptrs={**o.ptrs, 99: ("in", Ref(buf=f"{w.program}.embed.out"))})
    _patched_wire(monkeypatch, edit)
    with pytest.raises(WiringError, match="not a plain RMSNorm"):
        D.precompute(target["g"], tiny(target["cfg"]))


def test_precompute_refuses_a_k_proj_not_reading_its_layers_norm(target, monkeypatch):
    def edit(w):
        k = D._index(w, "L0.self_attn.k_proj", "gemm")
        w.ops[k] = replace(w.ops[k], args={**w.ops[k].args, "a": Ref(buf="elsewhere")})
    _patched_wire(monkeypatch, edit)
    with pytest.raises(WiringError, match="does not read its layer's input norm"):
        D.precompute(target["g"], tiny(target["cfg"]))


def test_precompute_refuses_a_reader_whose_producer_was_cut(target, monkeypatch):
    """A dropped op (q_proj) writing the buffer the kept K writer reads, after k_proj: in the
    cut, the read would see k_proj's value instead of the captured producer's."""
    def edit(w):
        kc = D._index(w, "L0.k_rope_cache")
        kp = D._index(w, "L0.self_attn.k_proj", "gemm")
        k_out = w.ops[kp].args["c"]
        w.ops.insert(kc, Op("gemm", "L0.intruder", None, args={
            "a": w.ops[kp].args["a"], "w": w.ops[kp].args["w"], "c": k_out,
            "n": w.ops[kp].args["n"], "k": w.ops[kp].args["k"]}))
    _patched_wire(monkeypatch, edit)
    with pytest.raises(WiringError, match="written last by captured op"):
        D.precompute(target["g"], tiny(target["cfg"]))


EXAMPLES = [t for t in ("llama", "qwen3")
            if (ROOT / f"examples/{'smollm2-135m' if t == 'llama' else 'qwen3-4b'}-dspark"
                / "manifest.json").exists()]


@pytest.mark.parametrize("name", EXAMPLES)
def test_dspark_example_regenerates_byte_for_byte(name, tmp_path):
    """``uv run --frozen kern-gen dspark <name>`` rewrites the committed example exactly
    (own cubins taken from the committed example: no nvcc needed)."""
    from kern_gen.dspark.command import TARGETS
    from kern_gen.dspark.generate import generate as gen_dspark
    from kern_gen.llama.pipeline import write
    cap, cfg_path = (ROOT / p for p in PRESETS[name][:2])
    out = ROOT / TARGETS[name][0]
    r = gen_dspark(cap, cfg_path, out / "dspark.json", label=TARGETS[name][1],
                   command=f"uv run --frozen kern-gen dspark {name}",
                   own_cubins=own_committed(out))
    write(r, tmp_path)
    assert_same_output(tmp_path, out)


def test_cli_refuses_an_unknown_target_and_a_missing_draft_config(tmp_path):
    from typer.testing import CliRunner
    from kern_gen.cli import app
    r = CliRunner().invoke(app, ["dspark", "mistral"])
    assert r.exit_code == 2 and "target `mistral`" in r.output
    r = CliRunner().invoke(app, ["dspark", "llama", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "dspark.json" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_prompts_precompute_twin_differs_only_in_its_gemms(name):
    """``draft_precompute_prefill`` is ``draft_precompute`` dispatch for dispatch, but its
    GEMMs are prefill's cuBLASLt kernel where the round's program has the own GEMV
    (llama.programs.GEMV_GEMMS: a 2048-row chunk 262 against 2972 µs on the H200)."""
    ex = ROOT / f"examples/{'smollm2-135m' if name == 'llama' else 'qwen3-4b'}-dspark"
    doc = json.loads((ex / "manifest.json").read_text())
    few, many = (doc["programs"][p]["dispatches"]
                 for p in ("draft_precompute", "draft_precompute_prefill"))
    assert len(few) == len(many)
    gemms = [(a, b) for a, b in zip(few, many) if a["kernel"] != b["kernel"]]
    assert gemms and all(b["kernel"] == "gemm" and a["kernel"].startswith(
        "draft_precompute.gemm.") for a, b in gemms)
    # the rest is the same dispatch, up to the programs' own workspace names
    def norm(d: dict) -> str:
        return json.dumps(d).replace("draft_precompute_prefill.", "draft_precompute.")
    assert all(norm(a) == norm(b) for a, b in zip(few, many) if a["kernel"] == b["kernel"])
    assert [a["label"] for a in few] == [b["label"] for b in many]
