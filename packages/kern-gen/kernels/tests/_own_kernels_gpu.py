"""Shared helpers for the GPU test and the benchmark: load kern's own cubins with cupy and
launch them on torch tensors (raw pointers + numpy scalars, i.e. the flat ABI of ABI.md)."""
from __future__ import annotations

import importlib.util
import math
import os
import tempfile
from pathlib import Path

import numpy as np

KERNELS = Path(__file__).resolve().parent.parent
PREFILL_SMEM = {64: 40960, 128: 81920}


def _build_module():
    spec = importlib.util.spec_from_file_location("kern_gen_kernels_build", KERNELS / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cubin_dir() -> Path:
    """``$KERN_KERNELS_CUBINS`` if set (device_check.sh builds there), else a fresh build."""
    env = os.environ.get("KERN_KERNELS_CUBINS")
    if env:
        return Path(env)
    out = Path(tempfile.mkdtemp(prefix="kern-cubins-"))
    _build_module().build(out)
    return out


def ptr(t) -> np.uint64:
    return np.uint64(t.data_ptr())


class Kernels:
    def __init__(self, directory: Path):
        import cupy
        self.cupy = cupy
        self.dir = Path(directory)
        self._mods = {}
        self._fns = {}
        self._smem_set = set()

    def fn(self, cubin: str, symbol: str):
        key = (cubin, symbol)
        if key not in self._fns:
            if cubin not in self._mods:
                self._mods[cubin] = self.cupy.RawModule(path=str(self.dir / cubin))
            f = self._mods[cubin].get_function(symbol)
            self._fns[key] = f
        return self._fns[key]

    # --- launchers (args exactly as in ABI.md) ---

    def embedding(self, ids, table, out):
        tokens, vocab, hidden = ids.shape[0], table.shape[0], table.shape[1]
        f = self.fn("embedding.cubin", "kern_embedding_bf16")
        f((tokens, 1, 1), (256, 1, 1), (ptr(ids), ptr(table), ptr(out), np.int32(hidden),
                                        np.int32(vocab)))

    def argmax(self, logits, part_val, part_idx, out, parts, vocab=None):
        rows = out.shape[0]
        vocab = logits.shape[-1] if vocab is None else vocab
        f1 = self.fn("argmax.cubin", "kern_argmax_bf16_partial")
        f2 = self.fn("argmax.cubin", "kern_argmax_bf16_reduce")
        f1((rows, parts, 1), (256, 1, 1), (ptr(logits), ptr(part_val), ptr(part_idx),
                                          np.int32(vocab)))
        f2((rows, 1, 1), (32, 1, 1), (ptr(part_val), ptr(part_idx), ptr(out), np.int32(parts)))

    def attn_decode(self, q, q_row_stride, k, v, pos0, part_ml, part_acc, out,
                    n_q, n_kv, splits, scale, tokens, s_min=None):
        """k, v: views [slots, n_kv, D] with unit last stride (any other strides); ``splits``:
        the grid's (most) splits, ``s_min``: the fewest a row uses (default: ``splits``, a
        fixed split count at every context)."""
        s_min = splits if s_min is None else s_min
        d = k.shape[-1]
        f1 = self.fn("attn_decode.cubin", f"kern_attn_decode_partial_bf16_d{d}")
        f2 = self.fn("attn_decode.cubin", f"kern_attn_decode_reduce_bf16_d{d}")
        f1((n_kv, splits, tokens), (128, 1, 1),
           (ptr(q), ptr(k), ptr(v), ptr(pos0), ptr(part_ml), ptr(part_acc),
            np.int32(q_row_stride), np.int64(k.stride(0)), np.int64(k.stride(1)),
            np.int64(v.stride(0)), np.int64(v.stride(1)), np.int32(n_q), np.int32(n_kv),
            np.float32(scale), np.int32(s_min)))
        f2((n_q, tokens, 1), (d, 1, 1),
           (ptr(part_ml), ptr(part_acc), ptr(pos0), ptr(out), np.int32(n_q), np.int32(splits),
            np.int32(s_min)))

    def attn_prefill(self, q, q_row_stride, k, v, pos0, out, n_q, n_kv, tokens, scale):
        d = k.shape[-1]
        f = self.fn("attn_prefill.cubin", f"kern_attn_prefill_bf16_d{d}")
        smem = PREFILL_SMEM[d]
        if (d, smem) not in self._smem_set:      # opt in above 48 KB (as kern-runtime does)
            f.max_dynamic_shared_size_bytes = smem
            self._smem_set.add((d, smem))
        f((math.ceil(tokens / 64), n_q, 1), (128, 1, 1),
          (ptr(q), ptr(k), ptr(v), ptr(pos0), ptr(out), np.int32(q_row_stride),
           np.int64(k.stride(0)), np.int64(k.stride(1)), np.int64(v.stride(0)),
           np.int64(v.stride(1)), np.int32(n_q), np.int32(n_kv), np.int32(tokens),
           np.float32(scale)), shared_mem=smem)


def make_cache(torch, layout: str, slots: int, n_kv: int, d: int, valid: int, gen, dev):
    """A bf16 KV pool in one of several layouts, NaN everywhere except the first ``valid``
    slots of K and V.  Returns (pool, k_view, v_view) with views [slots, n_kv, d]."""
    nan = float("nan")
    if layout == "slot_major_padded":        # [slot][k|v][head][d + 8]
        pool = torch.full((slots, 2, n_kv, d + 8), nan, dtype=torch.bfloat16, device=dev)
        k, v = pool[:, 0, :, :d], pool[:, 1, :, :d]
    elif layout == "head_major":              # [k|v][head][slot][d]
        pool = torch.full((2, n_kv, slots, d), nan, dtype=torch.bfloat16, device=dev)
        k, v = pool[0].transpose(0, 1), pool[1].transpose(0, 1)
    elif layout == "token_major":             # [k|v][slot][head][d]: the examples' states
        pool = torch.full((2, slots, n_kv, d), nan, dtype=torch.bfloat16, device=dev)
        k, v = pool[0], pool[1]
    elif layout == "interleaved":             # [slot][head][k|v][d]
        pool = torch.full((slots, n_kv, 2, d), nan, dtype=torch.bfloat16, device=dev)
        k, v = pool[:, :, 0], pool[:, :, 1]
    else:
        raise ValueError(layout)
    assert k.stride(-1) == 1 and v.stride(-1) == 1
    k[:valid].copy_(torch.randn((valid, n_kv, d), generator=gen, device=dev).to(torch.bfloat16))
    v[:valid].copy_(torch.randn((valid, n_kv, d), generator=gen, device=dev).to(torch.bfloat16))
    return pool, k, v


def make_q(torch, tokens: int, n_q: int, n_kv: int, d: int, gen, dev):
    """q as a view at element offset 8 of a fused qkv-like buffer (NaN outside q)."""
    width = 8 + n_q * d + 2 * n_kv * d + 8
    qkv = torch.full((tokens, width), float("nan"), dtype=torch.bfloat16, device=dev)
    q = qkv[:, 8:8 + n_q * d]
    q.copy_(torch.randn((tokens, n_q * d), generator=gen, device=dev).to(torch.bfloat16))
    return qkv, q, qkv.stride(0)


def ref_attention(torch, q, k, v, pos0: int, scale: float, n_q: int, n_kv: int):
    """float32 reference.  q [T, n_q*d]; k, v [slots, n_kv, d] views (bf16)."""
    tokens = q.shape[0]
    d = k.shape[-1]
    length = pos0 + tokens
    g = n_q // n_kv
    qf = q.float().reshape(tokens, n_q, d)
    kf = k[:length].float().repeat_interleave(g, dim=1)
    vf = v[:length].float().repeat_interleave(g, dim=1)
    s = torch.einsum("thd,lhd->htl", qf, kf) * scale
    rows = torch.arange(tokens, device=q.device)[:, None] + pos0
    cols = torch.arange(length, device=q.device)[None, :]
    s = s.masked_fill((cols > rows)[None], float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("htl,lhd->thd", p, vf)
