"""The capacity-free KV layout is asserted, not assumed: each test alters one fact of the
SmolLM2 capture (its sidecar, a cubin's compiled bound, Inductor's store arithmetic) in a copy
of the capture directory and expects ``kern-gen llama`` to refuse, naming the fact."""

from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path

import pytest
from kg_own import own_committed
from kern_mine import encode_json, mine

from kern_gen.llama import WiringError, generate
from kern_gen.llama.command import PRESETS
from kern_gen.llama.writers import LOG

ROOT = Path(__file__).resolve().parents[3]
CAP, CFG, OUT, LABEL = (ROOT / PRESETS["llama"][0], ROOT / PRESETS["llama"][1],
                        ROOT / PRESETS["llama"][2], PRESETS["llama"][3])

pytestmark = pytest.mark.skipif(not (CAP / LOG).exists(), reason="no Inductor log fixture")


@pytest.fixture(scope="module")
def mined(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("mined") / "mined.json"
    p.write_bytes(encode_json(mine(CAP)))
    return p


@pytest.fixture
def cap(tmp_path) -> Path:
    d = tmp_path / "capture"
    shutil.copytree(CAP, d)
    return d


def _gen(cap: Path, mined: Path, config: Path = CFG):
    return generate(cap, config, mined=mined, label=LABEL, command="test",
                    own_cubins=own_committed(OUT))


def _refuses(cap: Path, mined: Path, *needles: str, config: Path = CFG) -> str:
    with pytest.raises(WiringError) as ei:
        _gen(cap, mined, config)
    msg = str(ei.value)
    for n in needles:
        assert n in msg, f"{n!r} not in: {msg}"
    return msg


def _sidecar(cap: Path, fn) -> None:
    p = cap / "provider-sidecar.json"
    sc = json.loads(p.read_text())
    fn(sc)
    p.write_text(json.dumps(sc))


def _log(cap: Path, old: str, new: str) -> None:
    p = cap / LOG
    text = lzma.open(p, "rt", encoding="utf-8").read()
    assert old in text, old
    with lzma.open(p, "wt", encoding="utf-8") as f:
        f.write(text.replace(old, new))


def _tensor(sc: dict, name: str) -> dict:
    return next(t for t in sc["cache"]["tensors"] if t["name"] == name)


def test_the_unaltered_copy_generates(cap, mined):
    assert _gen(cap, mined).manifest == (OUT / "manifest.json").read_bytes()


def test_refuses_a_head_major_capture(cap, mined):
    """A capture made with transformers' StaticCache (the layout before issue 13)."""
    _sidecar(cap, lambda sc: sc["cache"].update(layout="head-major"))
    _refuses(cap, mined, "head-major", "recapture", "--cache-layout token-major")


def test_refuses_a_cache_shorter_than_the_model_limit(cap, mined):
    _sidecar(cap, lambda sc: sc["cache"].update(max_len=4096))
    _refuses(cap, mined, "4096 positions", "max_position_embeddings", "8192")


def test_refuses_another_cache_stride(cap, mined):
    """Layer 3's K cache strided head-major: its writer's addresses would not be the
    token-major ones the states and the attention assume."""
    def alter(sc):
        t = _tensor(sc, "layers.3.keys")
        t["stride"] = [1572864, 64, 524288, 1]
    _sidecar(cap, alter)
    _refuses(cap, mined, "layer 3", "layers.3.keys", "strides [1572864, 64, 524288, 1]",
             "[1572864, 192, 64, 1]")


def test_refuses_a_cache_of_other_bytes_per_token(cap, mined):
    def alter(sc):
        t = _tensor(sc, "layers.7.values")
        t["bytes"] = 8192 * 512
    _sidecar(cap, alter)
    _refuses(cap, mined, "layers.7.values", "4194304 bytes", "bytes_per_token 384", "3145728")


def test_refuses_a_writer_bound_other_than_the_cache_length(cap, mined):
    """Inductor's bounds check on the slot of the decode K writer says < 4096."""
    _log(cap, "tl.device_assert((0 <= tmp5) & (tmp5 < 8192)",
         "tl.device_assert((0 <= tmp5) & (tmp5 < 4096)")
    _refuses(cap, mined, "bounds check on the slot tmp5 is < 4096", "8192")


def test_refuses_a_store_coefficient_other_than_the_token_stride(cap, mined):
    _log(cap, "tl.store(out_ptr0 + (x0 + 192*tmp5), tmp7, xmask)",
         "tl.store(out_ptr0 + (x0 + 64*tmp5), tmp7, xmask)")
    _refuses(cap, mined, "v_cache", "the slot's coefficient is 64", "token stride is 192")


def test_refuses_a_capacity_term_in_a_store(cap, mined):
    """A head-major writer stores at d + head_dim*slot + L*head_dim*h: a coefficient of the
    capacity."""
    _log(cap, "tl.store(out_ptr0 + (x0 + 192*tmp5), tmp7, xmask)",
         "tl.store(out_ptr0 + (x0 + 192*tmp5 + 524288*x1), tmp7, xmask)")
    _refuses(cap, mined, "a coefficient of 524288", "(a capacity term)")


def test_refuses_a_cubin_without_the_bound(cap, mined, tmp_path):
    """The same capture claimed for a model limit of 7777: no cubin carries that bound."""
    def alter(sc):
        sc["config"]["max_position_embeddings"] = 7777
        sc["cache"]["max_len"] = 7777
        for t in sc["cache"]["tensors"]:
            t["shape"][1], t["stride"][0], t["bytes"] = 7777, 7777 * 192, 7777 * 384
    _sidecar(cap, alter)
    cfg = json.loads(CFG.read_text())
    cfg["max_position_embeddings"] = 7777
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    _refuses(cap, mined, "no int32 literal 7777", "compiled bounds check",
             config=tmp_path / "config.json")


def test_refuses_a_write_index_derived_from_the_positions(cap, mined):
    """The writers must load the capture's own `slots` input: a sidecar whose slots tensor
    sits elsewhere (the writers then read position_ids) is refused."""
    def alter(sc):
        for r in sc["requests"]:
            for f in r["forwards"]:
                f["slots_ptr"], f["position_ids_ptr"] = f["position_ids_ptr"], f["slots_ptr"]
    _sidecar(cap, alter)
    _refuses(cap, mined, "cache write index", "(it is the forward's position_ids)",
             "slots input")


def test_refuses_a_capture_without_slot_records(cap, mined):
    def alter(sc):
        for r in sc["requests"]:
            for f in r["forwards"]:
                del f["slots_ptr"]
    _sidecar(cap, alter)
    _refuses(cap, mined, "no `slots_ptr`", "--cache-layout token-major")


def test_refuses_a_capture_without_the_inductor_log(cap, mined):
    (cap / LOG).unlink()
    _refuses(cap, mined, "no Inductor code log", "inductor_code.log.xz")
