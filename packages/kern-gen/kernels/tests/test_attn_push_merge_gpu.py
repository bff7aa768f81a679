"""GPU test of the d128 lever of the cluster attention's pushed merge and fitted passes
(attn_decode_cluster.cu ``-D KERN_CLUSTER_PUSH_D128=1``, alone and with rope_core.cuh's
``-D KERN_ROPE_LOADS_FIRST=1``): bit for bit against the build (whose d128 keeps the old
merge), on test_attn_cluster_rope_gpu.py's d128 cases (contexts 1 to 4096, G = 1 and 4,
several rows a launch) plus the key counts around the fits' edges (16 and 32 keys a block):
the same output and the same K/V caches, for the plain and the folded-rope variants.

Session 31's c1 ran this test's first form (commit 7335ffa: push, fit and loads as separate
switches for both head sizes, against the examples' cubin of then; 72 passed with the
SiLU GEMV's), before the d64 code took the pushed merge and fitted passes.  Skips cleanly
without torch, cupy, a GPU or nvcc."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_attn_cluster_rope_gpu import CASES, _bits, decode_inputs  # noqa: E402

LEVERS = {
    "push": ("KERN_CLUSTER_PUSH_D128=1",),
    "push+loads": ("KERN_CLUSTER_PUSH_D128=1", "KERN_ROPE_LOADS_FIRST=1"),
}
# 8 blocks a (row, kv head), 16 key groups a block at d128: a block holds ceil(len / 8)
# keys, so these lengths put a block's count at, just over and just under the fits.
EDGES = [(32, 8, 128, True, [128, 129, 256, 257, 120]), (32, 8, 128, False, [16, 200])]
D128 = [c for c in CASES if c[2] == 128] + EDGES


@pytest.fixture(scope="module", params=sorted(LEVERS))
def lever(request, env):
    torch, ok, k = env
    d = Path(tempfile.mkdtemp(prefix="kern-push-d128-"))
    (d / "attn_decode_cluster.cubin").write_bytes(
        ok.cubin_bytes("attn_decode_cluster.cu", LEVERS[request.param]))
    return ok.Kernels(d)


@pytest.mark.gpu
@pytest.mark.parametrize("heads,kv_heads,d,norm,lens", D128)
def test_d128_lever_has_the_build_bits(env, lever, heads, kv_heads, d, norm, lens):
    torch, ok, k = env
    eps = 1e-6
    T = len(lens)
    x = decode_inputs(torch, ok, heads, kv_heads, d, lens, sum(lens) * 5 + heads + d + norm)
    outs = []
    for kern in (k, lever):
        kb, vb = x.kc.clone(), x.vc.clone()
        out = torch.full((T, heads, d), float("nan"), dtype=torch.bfloat16, device="cuda")
        kern.attn_decode_cluster_rope(x.qkv, x.ang, x.slots, kb, vb, x.kv_lens, x.table, out,
                                      heads, kv_heads, x.scale, x.n_slots,
                                      *((x.q_w, x.k_w, eps) if norm else ()))
        plain = torch.full((T, heads, d), float("nan"), dtype=torch.bfloat16, device="cuda")
        kern.attn_decode_cluster(x.qkv, x.width, kb, vb, x.kv_lens, x.table, plain, heads,
                                 kv_heads, x.scale, T)
        torch.cuda.synchronize()
        outs.append((out, kb, vb, plain))
    (a, ka, va, pa), (b, kb, vb, pb) = outs
    assert not torch.isnan(a.float()).any() and not torch.isnan(pa.float()).any()
    for u, v in ((a, b), (ka, kb), (va, vb), (pa, pb)):
        assert torch.equal(_bits(torch, u), _bits(torch, v))
