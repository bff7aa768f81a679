"""The ``rope_inv_freq`` derived weight (kern-gen llama binds it as
``model.rotary_emb.inv_freq``): HF's float32 recipe, shape and parameter checks."""

from __future__ import annotations

import numpy as np
import pytest

from kern_weights.derived import DERIVED
from kern_weights.errors import ExportError


def test_values_follow_hf_float32_recipe():
    a = DERIVED["rope_inv_freq"]({"theta": 100000.0}, {"head_dim": 64}, (32,), "w")()
    assert a.dtype == "f32" and a.shape == (32,)
    assert a.data.dtype == np.float32
    x = (np.arange(0, 64, 2).astype(np.float32) / np.float32(64))
    ref = np.float32(1) / np.power(np.float32(100000.0), x, dtype=np.float32)
    assert np.array_equal(a.data, ref)
    # and within 1 ulp of the exact value (the recipe rounds three times)
    exact = 100000.0 ** -(np.arange(0, 64, 2) / 64)
    assert np.all(np.abs(a.data - exact) <= 2 * np.spacing(np.float32(exact)))
    assert a.data[0] == 1.0


def test_theta_from_rope_parameters_and_head_dim_from_shape():
    a = DERIVED["rope_inv_freq"]({}, {"rope_parameters": {"rope_theta": 1e6}}, (64,), "w")()
    assert a.shape == (64,)
    assert a.data[1] == np.float32(1) / np.power(np.float32(1e6), np.float32(2) / np.float32(128),
                                                 dtype=np.float32)


@pytest.mark.parametrize("params,config,shape,needle", [
    ({"theta": 1e4, "head_dim": 64}, {}, (16,), "[32]"),
    ({"theta": 1e4}, {}, (4, 8), "1-d"),
    ({"theta": 1e4, "bogus": 1}, {}, (32,), "bogus"),
    ({}, {}, (32,), "theta"),
    ({"theta": 1e4}, {"rope_scaling": {"type": "yarn"}}, (32,), "rope_scaling"),
])
def test_refusals(params, config, shape, needle):
    with pytest.raises(ExportError) as ei:
        DERIVED["rope_inv_freq"](params, config, shape, "model.rotary_emb.inv_freq")
    assert needle in str(ei.value)
