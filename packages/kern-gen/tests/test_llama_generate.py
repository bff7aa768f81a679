"""kern-gen llama/qwen3 on the committed captures: the examples regenerate byte for byte,
verify clean, and every kind of asserted fact, altered in a copy of the inputs, makes the
generator refuse with a message naming the site and the fact."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import kern_manifest
import pytest
from kg_own import assert_same_output, own_committed
from kern_mine import decode_json, encode_json, mine

from kern_gen.llama import WiringError, generate
from kern_gen.llama.command import PRESETS
from kern_gen.llama.pipeline import _build_own, write

ROOT = Path(__file__).resolve().parents[3]
NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc"
                                if Path("/usr/local/bin/nvcc").exists() else None)
PRESET_NAMES = [p for p in PRESETS if (ROOT / PRESETS[p][2] / "manifest.json").exists()]


def _preset(name: str) -> tuple[Path, Path, Path, str]:
    cap, cfg, out, label = PRESETS[name]
    return ROOT / cap, ROOT / cfg, ROOT / out, label


def _own_committed(out: Path) -> dict[str, bytes]:
    return own_committed(out)


@pytest.fixture(scope="module")
def mined_json(tmp_path_factory) -> dict[str, Path]:
    """kern-mine's JSON for each preset's capture, computed once."""
    d = tmp_path_factory.mktemp("mined")
    res = {}
    for name in PRESET_NAMES:
        cap, *_ = _preset(name)
        p = d / f"{name}.json"
        p.write_bytes(encode_json(mine(cap)))
        res[name] = p
    return res


def _gen(name: str, mined: Path, **kw):
    cap, cfg, out, label = _preset(name)
    kw.setdefault("config", cfg)
    return generate(cap, kw.pop("config"), mined=mined, label=label,
                    command=f"uv run --frozen kern-gen {name}",
                    own_cubins=_own_committed(out), **kw)


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_regenerates_byte_for_byte(name, mined_json, tmp_path):
    _, _, out, _ = _preset(name)
    r = _gen(name, mined_json[name])
    write(r, tmp_path)
    assert_same_output(tmp_path, out)


@pytest.mark.skipif(NVCC is None, reason="nvcc not found: own cubins cannot be rebuilt here")
def test_own_kernels_rebuild_to_their_pins():
    own = _build_own(NVCC)
    for name in PRESET_NAMES:
        _, _, out, _ = _preset(name)
        for f, data in _own_committed(out).items():
            assert own[f] == data, f"{name}: {f} does not rebuild byte for byte"


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_example_verifies_and_pins_every_cubin(name):
    _, _, out, _ = _preset(name)
    vm = kern_manifest.load(out / "manifest.json")
    m = vm.manifest if hasattr(vm, "manifest") else kern_manifest.read(out / "manifest.json")
    used = set()
    for k in m.kernels.values():
        for s in k.impl.steps:
            if s.symbol.startswith("extern:"):
                continue
            assert s.cubin and s.sha256, s.symbol
            data = (out / "kernels" / s.cubin).read_bytes()
            assert hashlib.sha256(data).hexdigest() == s.sha256, s.cubin
            used.add(s.cubin)
    assert used == {p.name for p in (out / "kernels").iterdir()}
    assert set(m.programs) == {"prefill", "decode", "verify", "batch"}
    cfg = json.loads((out / "config.json").read_text())
    assert len(m.states) == 2 * cfg["num_hidden_layers"]
    assert all(st.bytes_per_token > 0 and not st.bytes_fixed for st in m.states.values())


def test_cli_writes_the_example(tmp_path):
    from typer.testing import CliRunner

    from kern_gen.cli import app
    if NVCC is None:
        pytest.skip("nvcc not found: the CLI builds the own kernels")
    cap, cfg, out, _ = _preset("llama")
    res = CliRunner().invoke(app, ["llama", "--capture", str(cap), "--config", str(cfg),
                                   "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "manifest.json").read_bytes() == (out / "manifest.json").read_bytes()


# --- falsification: one fact altered in a copy of the inputs -------------------------------

def _sidecar(name: str) -> dict:
    cap, *_ = _preset(name)
    return json.loads((cap / "provider-sidecar.json").read_text())


def _write(tmp: Path, obj: dict, fname: str) -> Path:
    p = tmp / fname
    p.write_text(json.dumps(obj))
    return p


def _refuses(name: str, mined: Path, *needles: str, **kw) -> str:
    with pytest.raises(WiringError) as ei:
        _gen(name, mined, **kw)
    msg = str(ei.value)
    for n in needles:
        assert n in msg, f"{n!r} not in: {msg}"
    return msg


def test_refuses_moved_weight_pointer(mined_json, tmp_path):
    sc = _sidecar("llama")
    w = next(t for t in sc["weights"] if t["name"] == "model.layers.3.mlp.up_proj.weight")
    w["data_ptr"] += 1 << 20
    _refuses("llama", mined_json["llama"], "model.layers.3.mlp.up_proj.weight", "site",
             "nvjet", sidecar=_write(tmp_path, sc, "sidecar.json"))


def test_refuses_moved_norm_weight(mined_json, tmp_path):
    sc = _sidecar("llama")
    w = next(t for t in sc["weights"]
             if t["name"] == "model.layers.7.post_attention_layernorm.weight")
    w["data_ptr"] += 4096
    _refuses("llama", mined_json["llama"], "post_attention_layernorm", "rsqrt",
             sidecar=_write(tmp_path, sc, "sidecar.json"))


def test_refuses_other_epsilon(mined_json, tmp_path):
    _, cfg, _, _ = _preset("llama")
    c = json.loads(cfg.read_text())
    c["rms_norm_eps"] = 1e-6
    _refuses("llama", mined_json["llama"], "eps", "1e-06",
             config=_write(tmp_path, c, "config.json"))


def test_refuses_other_cache_stride(mined_json, tmp_path):
    sc = _sidecar("llama")
    t = next(t for t in sc["cache"]["tensors"] if t["name"] == "layers.2.keys")
    t["stride"] = [t["stride"][0], t["stride"][3] * 64, t["stride"][1] // 1024 * 3, 1]
    _refuses("llama", mined_json["llama"], "layers.2.keys", "strides",
             sidecar=_write(tmp_path, sc, "sidecar.json"))


def test_refuses_cache_write_elsewhere(mined_json, tmp_path):
    sc = _sidecar("llama")
    t = next(t for t in sc["cache"]["tensors"] if t["name"] == "layers.4.values")
    t["data_ptr"] += 1 << 22
    _refuses("llama", mined_json["llama"], "layers.4.values", "index_copy",
             sidecar=_write(tmp_path, sc, "sidecar.json"))


def _mutate_mined(path: Path, tmp: Path, fn) -> Path:
    m = json.loads(path.read_bytes())
    fn(m)
    decode_json(json.dumps(m))          # still a valid kern-mined document
    return _write(tmp, m, "mined.json")


def _prefill_group(m: dict) -> dict:
    return max((g for g in m["groups"] if g["reference"]["site"] is not None),
               key=lambda g: len(set(g["tokens"])))


def test_refuses_other_width_literal(mined_json, tmp_path):
    """The prefill K/V writer of layer 5 gets the kv width 192 (kv_heads x head_dim) as its
    last literal (the row length of both stores); claim 256."""
    def alter(m):
        g = _prefill_group(m)
        sites = [s for s in g["sites"] if "index_copy" in s["kernel"] and "cos" in s["kernel"]]
        s = sites[5]
        f = next(f for f in s["fits"] if f["what"] == "param[8]")
        assert f["expr"] == 192
        f["expr"], f["text"] = 256, "256"
    p = _mutate_mined(mined_json["llama"], tmp_path, alter)
    with pytest.raises(WiringError) as ei:
        _gen("llama", p)
    msg = str(ei.value)
    assert "prefill" in msg and "index_copy" in msg and "256" in msg and "192" in msg, msg


def test_refuses_q_view_offset(mined_json, tmp_path):
    """q rope of layer 2 (decode) reading q 1152 bytes into the q_proj output."""
    def alter(m):
        g = next(g for g in m["groups"] if g["reference"]["site"] is None)
        sites = [s for s in g["sites"] if "cos" in s["kernel"] and "index_copy" not in
                 s["kernel"] and "flex" not in s["kernel"]]
        ptr = next(p for p in sites[2]["pointers"] if p["param"] == 0)
        ptr["offset"] += 1152
    p = _mutate_mined(mined_json["llama"], tmp_path, alter)
    with pytest.raises(WiringError) as ei:
        _gen("llama", p)
    msg = str(ei.value)
    assert "decode" in msg and "q rope reads q" in msg, msg


def test_refuses_token_counts_that_differ_from_the_sidecar(mined_json, tmp_path):
    sc = _sidecar("llama")
    for r in sc["requests"]:
        for f in r["forwards"]:
            if f["tokens"] == 34:
                f["tokens"] = 35
    _refuses("llama", mined_json["llama"], "token counts", "35",
             sidecar=_write(tmp_path, sc, "sidecar.json"))


def test_mined_json_and_direct_mining_agree(mined_json):
    cap, cfg, out, label = _preset("llama")
    a = _gen("llama", mined_json["llama"])
    b = generate(cap, cfg, label=label, command="uv run --frozen kern-gen llama",
                 own_cubins=_own_committed(out))
    assert a.manifest == b.manifest


@pytest.mark.parametrize("name,splits", [("llama", 32), ("qwen3", 16)])
def test_decode_attention_splits_follow_the_measured_rule(name, splits):
    """s_min = the power of two nearest 128 / kv_heads (3 kv heads -> 32, 8 -> 16: the fastest
    measured on the H200 up to ctx 4096), the grid (and the scratch) SPLIT_GROWTH times that
    for long contexts; the example's split pair (verify's attention, decode's with
    ``--attention split``) passes both."""
    from kern_gen.llama.own import SPLIT_GROWTH, decode_splits
    assert [decode_splits(k) for k in (1, 3, 4, 8, 16)] == [128, 32, 32, 16, 8]
    m = json.loads((_preset(name)[2] / "manifest.json").read_text())
    impl = m["kernels"]["verify.attention"]["impl"]
    grid = SPLIT_GROWTH * splits
    assert impl["scratch"]["part_ml"]["shape"][2] == impl["scratch"]["part_acc"]["shape"][2] == grid
    part, red = impl["steps"]       # two launches, partials then merge (ABI.md 3a)
    assert part["symbol"].startswith("kern_attn_decode_partial_bf16_d")
    assert red["symbol"].startswith("kern_attn_decode_reduce_bf16_d")
    assert part["grid"][1] == grid and part["args"][-2] == {"i32": splits}
    assert red["args"][-2:] == [{"i32": grid}, {"i32": splits}]
    assert part["args"][5:7] == red["args"][:2] == [{"scratch": s} for s in ("part_ml",
                                                                             "part_acc")]
    # the table's row stride is the block_table buffer's width
    assert part["args"][-1] == {"i32": m["buffers"]["block_table"]["shape"][1]}


FUSED_VERIFY = ("verify.gemm_silu.", "verify.gemm_split.", "verify.rope_kv")
FUSABLE = (".self_attn.q_proj", ".self_attn.k_proj", ".self_attn.v_proj", ".mlp.gate_proj",
           ".mlp.up_proj", ".silu_mul", ".k_rope_cache", ".q_rope", ".q_var", ".k_var",
           ".q_rope_sin", ".k_rope_sin")
"""Labels of the ops the few-row programs' fused GEMVs and rope kernels replace (proved in
kern_gen.llama.fuse, fuse_rope and fuse_rope_qk_norm)."""


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_verify_program_is_the_whole_prefill_forward_with_every_row_scored(name):
    """verify = the prefill graph's dispatches (same kernels, own buffers) through the last
    layer, then the final norm, lm_head with m = tokens and an argmax per row into
    `predictions` [tokens]; attention is the split-KV kernel with one z-slice per row."""
    m = json.loads((_preset(name)[2] / "manifest.json").read_text())
    pre = m["programs"]["prefill"]["dispatches"]
    ver_all = m["programs"]["verify"]["dispatches"]
    strip = lambda d: (d["label"], "attn" if "attention" in d["kernel"] else
                       "gemm" if d["kernel"].startswith(("gemm", "verify.gemm.")) else d["kernel"])
    # the fused GEMVs (kern_gen.llama.fuse, proved there) stand for q/k/v, gate/up + SiLU
    fused = [d for d in ver_all if d["kernel"].startswith(FUSED_VERIFY)]
    layers = sum(d["kernel"] in ("decode.attention", "decode.rope_attention")
                 for d in m["programs"]["decode"]["dispatches"])
    assert len(fused) == 3 * layers
    ver = [d for d in ver_all if not d["kernel"].startswith(FUSED_VERIFY)]
    pre = [d for d in pre if not d["label"].endswith(FUSABLE)]
    assert [strip(d) for d in ver[:len(pre)]] == [strip(d) for d in pre]
    assert all(a.get("buf", "").startswith(("verify.", "model.", "token_ids", "positions",
                                            "slots", "pos0", "kv_lens", "block_table",
                                            "predictions")) for d in ver for a in d["args"]
               if "buf" in a), "verify must not touch prefill's or decode's workspaces"
    lm, am = ver[-2], ver[-1]
    vocab, hidden = m["buffers"]["logits"]["shape"][1], lm["args"][5]["i32"]
    assert lm["kernel"] == f"verify.gemm.{vocab}x{hidden}" and lm["args"][3] == {"sym": "tokens"}
    assert lm["args"][4] == {"i32": m["buffers"]["logits"]["shape"][1]}
    assert am["args"] == [lm["args"][2], {"buf": "predictions"}]
    assert m["buffers"]["predictions"] == {"dtype": "i64", "shape": ["tokens"],
                                           "class": "output"}
    norm = ver[-3]
    assert norm["label"] == "norm" and lm["args"][0] in norm["args"]
    attn = m["kernels"]["verify.attention"]["impl"]
    assert [attn["steps"][0]["grid"][2], attn["steps"][1]["grid"][1]] == [{"sym": "tokens"}] * 2
    assert attn["scratch"]["part_acc"]["shape"][0] == "tokens"
    # decode's is the cluster kernel with the rope folded in (the default --attention
    # cluster-rope, ABI.md 3a‴), one row
    (dec,) = m["kernels"]["decode.rope_attention"]["impl"]["steps"]
    d = dec["symbol"].rsplit("_d", 1)[1]
    norm = "_norm" if name == "qwen3" else ""
    assert dec["symbol"] == f"kern_attn_decode_cluster_rope{norm}_bf16_d{d}"
    assert dec["grid"][2] == 1
    assert [s["symbol"] for s in attn["steps"]] == [f"kern_attn_decode_{p}_bf16_d{d}"
                                                    for p in ("partial", "reduce")]
    ag = m["kernels"][am["kernel"]]["impl"]["steps"]
    assert ag[0]["grid"][0] == {"sym": "tokens"} and ag[1]["grid"][0] == {"sym": "tokens"}


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_batch_program_is_verify_with_every_rows_token_in_next_token(name):
    """batch = verify's dispatches on the same kernels (workspaces of its own), each row's
    attention through its own table row and kv_len, the per-row argmax into `next_token`
    [tokens]; attention reads no `pos0` (rows are different sequences)."""
    m = json.loads((_preset(name)[2] / "manifest.json").read_text())
    ver = [d for d in m["programs"]["verify"]["dispatches"]
           if not d["kernel"].startswith(FUSED_VERIFY)]
    bat = [d for d in m["programs"]["batch"]["dispatches"] if not d["label"].endswith(FUSABLE)]
    # the same kernels, but for the GEMMs: verify's per shape (few rows), batch's the wide one;
    # verify's fused GEMVs (kern_gen.llama.fuse) left out against the ops they replace
    gemm = lambda k: "gemm" if k.startswith("verify.gemm.") else k
    assert [(d["label"], d["kernel"]) for d in bat] == [(d["label"], gemm(d["kernel"]))
                                                        for d in ver]
    assert {d["kernel"] for d in bat if "gemm" in d["kernel"]} == {"gemm"}
    rename = lambda a: {"buf": a["buf"].replace("verify.", "batch.", 1)} \
        if a.get("buf", "").startswith("verify.") else a
    for b, v in zip(bat[:-1], ver[:-1]):
        assert b["args"] == [rename(a) for a in v["args"]], b["label"]
    assert bat[-1]["args"] == [rename(ver[-1]["args"][0]), {"buf": "next_token"}]
    assert m["buffers"]["next_token"] == {"dtype": "i64", "shape": ["tokens"],
                                          "class": "output"}
    attn = [d for d in bat if d["kernel"] == "verify.attention"]
    layers = sum(d["kernel"] in ("decode.attention", "decode.rope_attention")
                 for d in m["programs"]["decode"]["dispatches"])
    assert len(attn) == layers > 0
    for d in attn:
        assert {"buf": "kv_lens"} in d["args"] and {"buf": "block_table"} in d["args"]
        assert {"buf": "pos0"} not in d["args"]


def test_refuses_lm_head_not_reading_the_final_norms_last_row(mined_json, tmp_path):
    """The captured prefill lm_head reads the last row of the final norm's output; verify
    multiplies every row of that tensor. Move A by one row: refused."""
    def alter(m):
        g = _prefill_group(m)
        gemm = [s for s in g["sites"] if s["kernel"].startswith("nvjet")][-1]
        ptr = next(p for p in gemm["pointers"] if p["param"] == 0 and p["at"] == 240)
        ptr["offset"] -= 576 * 2
    p = _mutate_mined(mined_json["llama"], tmp_path, alter)
    with pytest.raises(WiringError) as ei:
        _gen("llama", p)
    msg = str(ei.value)
    assert "verify" in msg and "lm_head reads A at the last of the 7 rows" in msg, msg
