"""Session 22, one-off: the refactored rope_kv.cu / rope_kv_norm.cu (rope_core.cuh) against
the cubins shipped before (built from 1590130's sources): every output bit equal, on random
inputs.  Usage: KERN_KERNELS_CUBINS=/tmp/own python3 .levers/rope_bits.py .levers/oldrope"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, "packages/kern-gen/kernels/tests")
import _own_kernels_gpu as ok  # noqa: E402

new, old = ok.Kernels(ok.cubin_dir()), ok.Kernels(Path(sys.argv[1]))
bad = 0
for trial in range(40):
    g = torch.Generator(device="cuda").manual_seed(trial)
    T = [1, 1, 3, 16][trial % 4]
    H, KV, D = [(9, 3, 64), (32, 8, 128), (16, 2, 128), (4, 4, 64)][trial // 4 % 4]
    L = 64
    qkv = (3 * torch.randn((T, (H + 2 * KV) * D), generator=g, device="cuda")).to(torch.bfloat16)
    qkv[0, :7] = 0.0                     # zeros: the sign of a zero result must match too
    q_w = (1 + 0.5 * torch.randn((D,), generator=g, device="cuda")).to(torch.bfloat16)
    k_w = (1 + 0.5 * torch.randn((D,), generator=g, device="cuda")).to(torch.bfloat16)
    pos = torch.randint(0, 40960, (T,), generator=g, device="cuda")
    inv = 1.0 / (1e6 ** (torch.arange(0, D, 2, device="cuda").float() / D))
    ang = (inv[:, None] * pos[None, :].float()).contiguous()
    slots = torch.randperm(L, generator=g, device="cuda")[:T]
    q, k, v = (x.contiguous() for x in qkv.split([H * D, KV * D, KV * D], dim=1))
    outs = []
    for K in (new, old):
        res = []
        for name in ("rope_kv", "rope_kv3", "rope_kv_norm", "rope_kv3_norm"):
            q_out = torch.full((T, H * D), float("nan"), dtype=torch.bfloat16, device="cuda")
            kc = torch.full((L, KV, D), 7.0, dtype=torch.bfloat16, device="cuda")
            vc = kc.clone()
            ins = (qkv,) if name in ("rope_kv", "rope_kv_norm") else (q, k, v)
            extra = (q_w, k_w) if "norm" in name else ()
            tail = (1e-6,) if "norm" in name else ()
            getattr(K, name)(*ins, *extra, ang, slots, q_out, kc, vc, H, KV, D, L, *tail)
            res += [q_out, kc, vc]
        torch.cuda.synchronize()
        outs.append(res)
    for a, b in zip(*outs):
        if not torch.equal(a.view(torch.int16), b.view(torch.int16)):
            bad += 1
print(f"rope refactor: {40 * 12 - bad} of {40 * 12} outputs bit-identical to the old cubins")
sys.exit(1 if bad else 0)
