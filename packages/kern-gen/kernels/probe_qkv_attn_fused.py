"""Issue 16 lever probe: the Qwen3 decode layer's qkv GEMV and attention as one launch
(levers/qkv_attn_fused.cu: the completing block of each kv head attends alone) against the
shipped pair (gemv.cu's kern_gemv_et_bf16, then attn_decode_cluster.cu's
kern_attn_decode_cluster_rope_norm_bf16_d128), Qwen3-4B shapes, one row, in one process.

    python3 packages/kern-gen/kernels/build.py /tmp/own     # gemv.cubin, attn_decode_cluster.cubin
    python3 packages/kern-gen/kernels/probe_qkv_attn_fused.py /tmp/own

1. Correctness (layer 0, contexts 144 and 1000): the fused qkv row bit for bit against
   kern_gemv_bf16's, the new key's cache rows bit for bit against the cluster kernel's, and
   both attentions' outputs against a float32 reference computed here with torch from the
   same qkv row and cache (max |error|); the kv heads' counters back at zero.
2. µs a layer: the chain qkv -> attention -> o GEMV for 36 layers (each its own weights and
   cache) with PDL in one CUDA graph, medians of replays, two interleaved reps: shipped, the
   fused kernel built for 2 and 3 blocks an SM (128 registers / 80 with spills), and o right
   after qkv without attention (what no attention at all would cost).
"""
import math
import sys
from pathlib import Path

import cupy
import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "tests"))
import _own_kernels_gpu as okg  # noqa: E402
import bench  # noqa: E402  (paged_layer)
from bench_gemv_tma import graph_us  # noqa: E402

LAYERS, N_Q, N_KV, D, HIDDEN = 36, 32, 8, 128, 2560
G, NQKV, EPS = N_Q // N_KV, (N_Q + 2 * N_KV) * D, 1e-6
MIN_BLOCKS = (2, 3)


def build(own: Path) -> dict[int, Path]:
    """levers/qkv_attn_fused.cu for each KERN_FUSED_MIN_BLOCKS (ptxas reports on stderr)."""
    b = okg._build_module()
    return {nb: b.build_one(b.find_nvcc(), HERE / "levers" / "qkv_attn_fused.cu", own / f"fz{nb}",
                            verbose=True, defines=(f"KERN_FUSED_MIN_BLOCKS={nb}",))
            for nb in MIN_BLOCKS}


class Layers:
    """36 layers' weights, caches and outputs at context ``ctx`` (the new key is ctx - 1)."""

    def __init__(self, ctx: int, gen):
        def rnd(*shape, scale=0.02):
            return (torch.randn(shape, generator=gen, device="cuda") * scale).to(torch.bfloat16)
        self.ctx = ctx
        self.w_qkv = [rnd(NQKV, HIDDEN) for _ in range(LAYERS)]
        self.w_o = [rnd(HIDDEN, N_Q * D) for _ in range(LAYERS)]
        self.x = rnd(1, HIDDEN, scale=1.0)
        self.qkv = [torch.empty((1, NQKV), dtype=torch.bfloat16, device="cuda") for _ in range(LAYERS)]
        self.att = [torch.empty((1, N_Q * D), dtype=torch.bfloat16, device="cuda") for _ in range(LAYERS)]
        self.o = torch.empty((1, HIDDEN), dtype=torch.bfloat16, device="cuda")
        self.pools = [bench.paged_layer(N_KV, D, [ctx], False, gen) for _ in range(LAYERS)]
        self.q_w, self.k_w = rnd(D, scale=1.0), rnd(D, scale=1.0)
        self.ang = torch.rand((D // 2, 1), generator=gen, device="cuda") * 6.0
        self.lens = torch.full((1,), ctx, dtype=torch.int32, device="cuda")
        self.slots = [torch.tensor([int(t[0, (ctx - 1) // okg.PAGE]) * okg.PAGE + (ctx - 1) % okg.PAGE],
                                   dtype=torch.int64, device="cuda") for _, _, t in self.pools]
        self.counters = torch.zeros(N_KV, dtype=torch.int32, device="cuda")


class Kernels:
    def __init__(self, own: Path):
        self.launch = okg.pdl_launcher()
        gm = cupy.RawModule(path=str(own / "gemv.cubin"))
        am = cupy.RawModule(path=str(own / "attn_decode_cluster.cubin"))
        self.g_et, self.g_plain = gm.get_function("kern_gemv_et_bf16"), gm.get_function("kern_gemv_bf16")
        self.attn = am.get_function(f"kern_attn_decode_cluster_rope_norm_bf16_d{D}")
        self.fused = {nb: cupy.RawModule(path=str(p)).get_function("kern_qkv_attn_fused_bf16_d128")
                      for nb, p in build(own).items()}

    def _go(self, fn, grid, block, args):
        self.launch(fn, grid, block, 0, torch.cuda.current_stream().cuda_stream, args)

    def gemv(self, fn, a, w, c):
        n, k = w.shape
        self._go(fn, (-(-n // 16), 1, 1), (32 * okg.gemv_warps(n, k), 1, 1),
                 [okg.ptr(a), okg.ptr(w), okg.ptr(c), np.int32(1), np.int32(n), np.int32(k)])

    def _attn_tail(self, L: Layers, i: int):
        kc, vc, table = L.pools[i]
        p = okg.ptr
        return [p(L.q_w), p(L.k_w), p(L.ang), p(L.slots[i]), p(kc), p(vc), p(L.lens), p(table),
                p(L.att[i])], (kc, vc, table)

    def attention(self, L: Layers, i: int):
        head, (kc, vc, table) = self._attn_tail(L, i)
        self._go(self.attn, (N_KV, 8, 1), (256, 1, 1),
                 [okg.ptr(L.qkv[i])] + head +
                 [np.int32(1), np.int64(kc.stride(0)), np.int64(kc.stride(1)),
                  np.int64(vc.stride(0)), np.int64(vc.stride(1)), np.int32(N_Q), np.int32(N_KV),
                  np.float32(1 / math.sqrt(D)), np.int32(table.stride(0)),
                  np.int64(kc.shape[0]), np.float32(EPS)])

    def fused_(self, nb: int, L: Layers, i: int):
        head, (kc, vc, table) = self._attn_tail(L, i)
        p = okg.ptr
        self._go(self.fused[nb], (NQKV // 16, 1, 1), (256, 1, 1),
                 [p(L.x), p(L.w_qkv[i]), p(L.qkv[i])] + head +
                 [p(L.counters), np.int32(HIDDEN), np.int64(kc.stride(0)), np.int64(kc.stride(1)),
                  np.int64(vc.stride(0)), np.int64(vc.stride(1)), np.int32(N_Q), np.int32(N_KV),
                  np.float32(1 / math.sqrt(D)), np.int32(table.stride(0)),
                  np.int64(kc.shape[0]), np.float32(EPS)])


def reference(L: Layers, i: int) -> torch.Tensor:
    """float32 attention of layer i from its qkv row and cache (the new key's rows as the
    kernels stored them): [N_Q * D]."""
    kc, vc, table = L.pools[i]
    row = L.qkv[i][0].float()
    q = row[:N_Q * D].view(N_Q, D)

    def norm_rope(h, w):
        n = w.float() * (h * torch.rsqrt((h * h).mean(-1, keepdim=True) + EPS))
        a = L.ang[:, 0]
        rot = torch.cat([-n[..., D // 2:], n[..., :D // 2]], -1)
        return n * torch.cos(torch.cat([a, a])) + rot * torch.sin(torch.cat([a, a]))
    q = norm_rope(q, L.q_w).to(torch.bfloat16).float()
    j = torch.arange(L.ctx, device="cuda")
    slot = table[0, j // okg.PAGE].long() * okg.PAGE + j % okg.PAGE
    k, v = kc[slot].float(), vc[slot].float()                        # [ctx, N_KV, D]
    k, v = k.repeat_interleave(G, 1).transpose(0, 1), v.repeat_interleave(G, 1).transpose(0, 1)
    p = torch.softmax((q[:, None, :] @ k.transpose(1, 2))[:, 0] / math.sqrt(D), -1)
    return (p[:, None, :] @ v)[:, 0].reshape(-1)


def check(kn: Kernels, L: Layers) -> bool:
    kc, vc, table = L.pools[0]
    s = int(L.slots[0])
    kn.gemv(kn.g_plain, L.x, L.w_qkv[0], L.qkv[0])
    kn.attention(L, 0)
    torch.cuda.synchronize()
    qkv_ref, k_ref, v_ref = L.qkv[0].clone(), kc[s].clone(), vc[s].clone()
    ref = reference(L, 0)
    err_c = (L.att[0][0].float() - ref).abs().max().item()
    ok = True
    for nb in MIN_BLOCKS:
        for t in (L.qkv[0], L.att[0], kc[s], vc[s]):    # what the fused kernel must write
            t.zero_()
        kn.fused_(nb, L, 0)
        torch.cuda.synchronize()
        err_f = (L.att[0][0].float() - ref).abs().max().item()
        bits = torch.equal(L.qkv[0], qkv_ref) and torch.equal(kc[s], k_ref) and torch.equal(vc[s], v_ref)
        zero = int(L.counters.abs().sum()) == 0
        good = bits and zero and err_f <= max(2 * err_c, 4e-3)
        ok &= good
        print(f"  ctx {L.ctx:5d} fused/{nb}: qkv + new K/V rows {'equal' if bits else 'DIFFER'}; "
              f"max |err| vs float32 {err_f:.2e} (cluster {err_c:.2e}); counters "
              f"{'zero' if zero else L.counters.tolist()}; {'ok' if good else 'FAIL'}", flush=True)
    return ok


def chains(kn: Kernels, L: Layers) -> dict:
    def shipped():
        for i in range(LAYERS):
            kn.gemv(kn.g_et, L.x, L.w_qkv[i], L.qkv[i])
            kn.attention(L, i)
            kn.gemv(kn.g_plain, L.att[i], L.w_o[i], L.o)

    def fused(nb):
        def run():
            for i in range(LAYERS):
                kn.fused_(nb, L, i)
                kn.gemv(kn.g_plain, L.att[i], L.w_o[i], L.o)
        return run

    def no_attention():
        for i in range(LAYERS):
            kn.gemv(kn.g_et, L.x, L.w_qkv[i], L.qkv[i])
            kn.gemv(kn.g_plain, L.att[i], L.w_o[i], L.o)
    rows = {"shipped (qkv_et, cluster attention, o)": shipped}
    rows.update({f"fused, {nb} blocks an SM, o": fused(nb) for nb in MIN_BLOCKS})
    rows["no attention (qkv_et, o)"] = no_attention
    out = {name: [] for name in rows}
    for _ in range(2):
        for name, fn in rows.items():
            out[name].append(graph_us(fn, reps=30) / LAYERS)
    return out


def main() -> int:
    kn = Kernels(Path(sys.argv[1]))
    print(torch.cuda.get_device_name(0), flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    ok = True
    for ctx in (144, 1000):
        L = Layers(ctx, gen)
        print(f"== context {ctx}: correctness (layer 0)", flush=True)
        ok &= check(kn, L)
        print(f"== context {ctx}: µs a layer (qkv -> attention -> o, 36 layers, PDL, graph; "
              f"two interleaved reps)", flush=True)
        for name, us in chains(kn, L).items():
            print(f"  {name:42s} {us[0]:7.2f} {us[1]:7.2f}", flush=True)
        ok &= int(L.counters.abs().sum()) == 0
        del L
        torch.cuda.empty_cache()
    print("fused:", "ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
