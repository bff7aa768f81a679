"""``--attention cluster`` (issue 16, the default since session 22): decode's attention as one
launch whose 8 key splits of a (row, kv head) merge in a thread-block cluster
(kernels/attn_decode_cluster.cu, ABI.md 3a″).  Against ``--attention split`` (the pair, ABI.md
3a) only ``decode.attention`` differs: same interface, one step without scratch that follows
ABI.md 3a″, marked ``pdl`` (its code waits on the grid dependency first); verify, batch and
prefill keep their kernels; attn_decode_cluster.cubin is among the cubins; each README says
which.  A model with more than 4 query heads per kv head is refused."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import kern_manifest
import pytest
from kg_own import own_committed
from kern_mine import encode_json, mine

from kern_gen.llama import WiringError, generate
from kern_gen.llama import own
from kern_gen.llama.command import PRESETS

ROOT = Path(__file__).resolve().parents[3]
ABI = (ROOT / "packages/kern-gen/kernels/ABI.md").read_text()


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> dict[str, tuple]:
    """Per preset: (Result with --attention split, the committed example's manifest dict and
    README, the committed cluster cubin's sha256)."""
    out = {}
    for name in PRESETS:
        cap, cfg, ex, label = (ROOT / p if i < 3 else p for i, p in enumerate(PRESETS[name]))
        mined = tmp_path_factory.mktemp("mined") / f"{name}.json"
        mined.write_bytes(encode_json(mine(cap)))
        res = generate(cap, cfg, mined=mined, label=label, attention="split",
                       own_cubins=own_committed(ex),
                       command=f"uv run --frozen kern-gen {name} --attention split")
        out[name] = (res, json.loads((ex / "manifest.json").read_text()),
                     (ex / "README.md").read_text(),
                     hashlib.sha256((ex / "kernels/attn_decode_cluster.cubin").read_bytes())
                     .hexdigest())
    return out


@pytest.mark.parametrize("name", list(PRESETS))
def test_split_manifest_verifies_clean(split, name):
    text = split[name][0].manifest.decode()
    diags = kern_manifest.verify(kern_manifest.decode(text))
    assert not diags, kern_manifest.render_human(diags, text)


@pytest.mark.parametrize("name", list(PRESETS))
def test_only_decode_attention_differs(split, name):
    res, a, readme, _ = split[name]
    b = json.loads(res.manifest)
    for key in ("programs", "symbols", "states", "buffers"):
        assert json.dumps(a[key]) == json.dumps(b[key]), key
    assert list(a["kernels"]) == list(b["kernels"])
    differ = {k for k in a["kernels"] if a["kernels"][k] != b["kernels"][k]}
    assert differ == {"decode.attention"}
    assert a["kernels"]["decode.attention"]["params"] == b["kernels"]["decode.attention"]["params"]
    assert set(res.cubins) | {"attn_decode_cluster.cubin"} == \
        {p.name for p in (ROOT / PRESETS[name][2] / "kernels").glob("*.cubin")}
    assert "attn_decode_cluster.cubin" not in res.cubins
    assert "- **Decode attention** `--attention cluster` (the default): " in readme
    text = res.readme.decode()
    assert "- **Decode attention** `--attention split`: " in text
    assert f"kern-gen {name} --attention split" in text


@pytest.mark.parametrize("name", list(PRESETS))
def test_cluster_step_follows_the_abi(split, name):
    res, doc, _, sha = split[name]
    cfg = json.loads((ROOT / PRESETS[name][1]).read_text())
    d = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    H, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    kern = doc["kernels"]["decode.attention"]
    assert kern["params"] == own.DECODE_IFACE and "scratch" not in kern["impl"]
    (st,) = kern["impl"]["steps"]
    assert st["symbol"] == f"kern_attn_decode_cluster_bf16_d{d}"
    assert (st["cubin"], st["sha256"], st["pdl"]) == ("attn_decode_cluster.cubin", sha, True)
    assert st["params"] == own.CLUSTER_PARAMS
    assert st["block"] == [256, 1, 1] and st["grid"] == [KVH, 8, 1]
    args = st["args"]
    assert args[:6] == [{"arg": i} for i in range(6)]
    assert args[11:14] == [{"i32": H}, {"i32": KVH}, {"f32": 1.0 / math.sqrt(d)}]
    # q_row_stride, the cache strides and the table's row stride as the pair's partial's
    p_args = json.loads(res.manifest)["kernels"]["decode.attention"]["impl"]["steps"][0]["args"]
    assert args[6:11] == p_args[7:12] and args[14] == p_args[16]


def test_abi_documents_the_launch():
    """ABI.md 3a″ states the step's parameter list, and the cubin row names both symbols;
    the kernel's compile-time constants equal the generator's."""
    assert "`" + json.dumps(own.CLUSTER_PARAMS) + "`" in ABI
    assert ("| `attn_decode_cluster.cubin` | `kern_attn_decode_cluster_bf16_d64`, "
            "`kern_attn_decode_cluster_bf16_d128` |") in ABI
    src = (ROOT / "packages/kern-gen/kernels/attn_decode_cluster.cu").read_text()
    assert re.search(r"constexpr int kC = (\d+);", src).group(1) == str(own.CLUSTER_SPLITS)
    assert re.search(r"constexpr int kMaxG = (\d+);", src).group(1) == \
        str(own.CLUSTER_MAX_GROUP)
    for d in (64, 128):
        assert re.search(rf"#define KERN_CLUSTER_THREADS_D{d} (\d+)", src).group(1) == \
            str(own.CLUSTER_THREADS)


def test_more_than_four_query_heads_per_kv_head_is_refused():
    """The kernel holds G <= 4 query heads of a kv head: SmolLM2's config with 1 kv head (G =
    9) is refused with the fix named (the emitter reads only the config before it refuses)."""
    from kern_gen.llama import config as C
    spec = C.load(ROOT / PRESETS["llama"][1])
    with pytest.raises(WiringError, match=r"at most 4 query heads per kv head; the model has "
                                          r"9 query / 1 kv heads: use --attention split"):
        own._cluster(_ConfigOnly(replace(spec, kv_heads=1)), "decode", 1, [])


class _ConfigOnly:
    """An assembler stand-in holding the model's config alone."""

    def __init__(self, cfg) -> None:
        self.cfg = cfg
