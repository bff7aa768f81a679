"""The architecture table (``kern_gen.llama.arch.ARCHS``): every row is consistent (each role
its layouts, literals and site counts name is one its rules can yield, and has a handler in
``roles.HANDLERS``), kernel names map to the family's roles, and a new family is a new record
over the Llama base."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from kern_gen.llama import WiringError
from kern_gen.llama.arch import ARCHS, LLAMA, Rule
from kern_gen.llama.config import ModelConfig
from kern_gen.llama.roles import HANDLERS

CFG = ModelConfig("toy", vocab=64, hidden=64, intermediate=128, layers=2, heads=4, max_positions=256,
                  kv_heads=2, head_dim=16, eps=1e-6, rope_theta=1e4, tie_embeddings=True)


def _site(name: str, replay: str = "replay") -> SimpleNamespace:
    return SimpleNamespace(name=name, index=7, group=1, info=SimpleNamespace(replay=replay))


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_every_row_names_only_roles_its_rules_yield(name):
    arch = ARCHS[name]
    assert arch.name == name
    roles = {r.role for r in arch.rules}
    assert roles <= set(HANDLERS), "every role the rules yield has a handler (roles.py)"
    assert {role for role, _ in arch.layout} <= roles
    assert set(arch.layer_sites) <= roles and arch.eps_roles <= roles
    for role, decode in arch.layout:
        assert isinstance(arch.scalars(CFG, role, decode), list)
    assert len(arch.gemm_weights(CFG, False)) == CFG.layers * len(arch.layer_gemms) + 1
    assert arch.norm_weights(CFG)[-1] == "model.norm.weight"


@pytest.mark.parametrize("kernel,llama,qwen3", [
    ("nvjet_tst_128x64_64x4_1x2_h_bz_coopA_TNT", "gemm", "gemm"),
    ("triton_poi_fused_embedding_0", "embed", "embed"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1", "norm", "norm"),
    ("triton_poi_fused_cat_cos_mul_sin_3", "q_rope", "q_rope"),
    ("triton_per_fused_cos_mean_mul_pow_rsqrt_sin_5", "q_rope", "q_rope"),
    ("triton_poi_fused_mul_rsqrt_sin_6", None, "rope_sin"),
    ("triton_red_fused_mean_pow_view_4", None, "qk_var"),
    ("triton_poi_fused_index_copy_cos_mul_sin_2", "k_rope_cache", "k_rope_cache"),
])
def test_kernel_names_map_to_the_familys_roles(kernel, llama, qwen3):
    for arch, want in ((ARCHS["llama"], llama), (ARCHS["qwen3"], qwen3)):
        if want is None:          # no role in this family: refused
            with pytest.raises(WiringError, match="no role in the Llama wiring"):
                arch.role_of(_site(kernel))
        else:
            assert arch.role_of(_site(kernel, "extra" if want == "gemm" else "replay")) == want


def test_a_new_family_is_a_record_over_the_llama_base():
    toy = replace(LLAMA, name="toy", rules=(Rule("norm", has=("toy_norm",)),) + LLAMA.rules)
    assert toy.role_of(_site("triton_toy_norm_0")) == "norm"
    assert toy.role_of(_site("triton_poi_fused_mul_silu_9")) == "silu"
    with pytest.raises(WiringError, match="site 7 `triton_toy_norm_0` .group 1.: no role"):
        LLAMA.role_of(_site("triton_toy_norm_0"))
