"""GPU tests of the cluster-merged decode attention (``attn_decode_cluster.cu``, ABI.md 3a″,
``kern-gen --attention cluster``): single sequences through an identity table at contexts
1-8192 on three cache layouts, batches of sequences through permuted pages (page 0 poisoned,
unused slots NaN), kv_lens changed in device memory between launches with one set of launch
arguments (graph replay), and agreement with the split pair (ABI.md 3a) within the float32
reference's tolerance; output poisoned with NaN first, compared with torch in float32.

Every test is marked ``gpu`` and skips cleanly without torch, cupy, a GPU or nvcc (the ``env``
fixture, ``conftest.py``).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _own_kernels_gpu import compare as _compare  # noqa: E402
from test_attn_gpu import (CONFIGS, GEN_SPLITS, _attn_inputs, _decode_two_step,  # noqa: E402
                           _lengths, _paged_batch, _ref_rows)


def _cluster(torch, k, q, q_stride, kc, vc, lens, table, n_q, n_kv, scale):
    out = torch.full((q.shape[0], n_q, kc.shape[-1]), float("nan"), dtype=torch.bfloat16,
                     device="cuda")
    k.attn_decode_cluster(q, q_stride, kc, vc, lens, table, out, n_q, n_kv, scale, q.shape[0])
    torch.cuda.synchronize()
    return out


SINGLE_CASES = [
    # cfg, layout, tokens, pos0, scale_mul (G = n_q / n_kv: 3, 4, 1, 2; more than 4 traps and
    # kern-gen refuses it, test_llama_attention_cluster.py)
    ("9q3kv_d64", "slot_major_padded", 1, 0, 1.0),       # one key: 7 of 8 blocks empty
    ("9q3kv_d64", "head_major", 1, 6, 1.0),
    ("9q3kv_d64", "interleaved", 1, 143, 1.0),
    ("9q3kv_d64", "slot_major_padded", 1, 1023, 4.0),
    ("9q3kv_d64", "head_major", 1, 8191, 1.0),
    ("32q8kv_d128", "slot_major_padded", 1, 0, 1.0),
    ("32q8kv_d128", "interleaved", 1, 16, 1.0),
    ("32q8kv_d128", "head_major", 1, 143, 1.0),
    ("32q8kv_d128", "slot_major_padded", 1, 1015, 4.0),
    ("32q8kv_d128", "interleaved", 1, 8191, 1.0),
    ("32q8kv_d128", "head_major", 7, 300, 1.0),           # rows of one sequence (causal lens)
    ("4q4kv_d128", "interleaved", 1, 1, 1.0),
    ("16q8kv_d64", "head_major", 3, 200, 1.0),
]


@pytest.mark.gpu
@pytest.mark.parametrize("cfg,layout,tokens,pos0,scale_mul", SINGLE_CASES)
def test_cluster_decode(env, cfg, layout, tokens, pos0, scale_mul):
    torch, ok, k = env
    n_q, n_kv, d, pool, kc, vc, qkv, q, q_stride, pos = _attn_inputs(
        torch, ok, cfg, layout, tokens, pos0, seed=pos0 * 13 + tokens)
    scale = scale_mul / math.sqrt(d)
    table = ok.identity_table(torch, tokens, pos0 + tokens, "cuda")
    lens = ok.causal_kv_lens(torch, pos0, tokens, "cuda")
    out = _cluster(torch, k, q, q_stride, kc, vc, lens, table, n_q, n_kv, scale)
    ref = ok.ref_attention(torch, q, kc, vc, pos0, scale, n_q, n_kv)
    _compare(torch, f"cluster decode {cfg} {layout} T={tokens} pos0={pos0} "
                    f"scale={scale_mul}/sqrt(d)", out, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg,layout,spec", [
    ("9q3kv_d64", "token_major", (64, 2048, (16384, 1, 17))),
    ("32q8kv_d128", "slot_major_padded", (64, 1200, (4096, 777, 1))),
])
def test_cluster_decode_paged_batch(env, cfg, layout, spec):
    """B rows of B sequences through permuted pages (page 0 poisoned; table entries past a
    row's pages point at it): a key >= kv_lens[t] read would show in the output."""
    torch, ok, k = env
    lengths = _lengths(spec, gen_seed=spec[0] + spec[1])
    q, q_stride, kc, vc, table, lens, logical, _ = _paged_batch(env, cfg, layout, lengths,
                                                                seed=spec[1])
    n_q, n_kv, d = CONFIGS[cfg]
    scale = 1 / math.sqrt(d)
    out = _cluster(torch, k, q, q_stride, kc, vc, lens, table, n_q, n_kv, scale)
    ref = _ref_rows(torch, ok, q, logical, scale, n_q, n_kv)
    _compare(torch, f"cluster paged {cfg} {layout} B={len(lengths)} max {max(lengths)}",
             out, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", ["9q3kv_d64", "32q8kv_d128"])
def test_cluster_kv_lens_from_device_memory(env, cfg):
    """One set of launch arguments, kv_lens changed only in device memory (graph replay);
    each result also within tolerance of the split pair's on the same inputs."""
    torch, ok, k = env
    n_q, n_kv, d, pool, kc, vc, qkv, q, q_stride, pos = _attn_inputs(
        torch, ok, cfg, "slot_major_padded", 1, 900, seed=3)
    scale = 1 / math.sqrt(d)
    table = ok.identity_table(torch, 1, 901, "cuda")
    lens = torch.zeros((1,), dtype=torch.int32, device="cuda")
    S, s_min = GEN_SPLITS[cfg]
    for p in (0, 1, 7, 8, 9, 63, 64, 65, 900):
        lens.fill_(p + 1)
        out = _cluster(torch, k, q, q_stride, kc, vc, lens, table, n_q, n_kv, scale)
        ref = ok.ref_attention(torch, q, kc, vc, p, scale, n_q, n_kv)
        _compare(torch, f"cluster {cfg} replay-style kv_len={p + 1}", out, ref)
        pair = _decode_two_step(torch, k, q, q_stride, kc, vc, lens, table, n_q, n_kv, S,
                                scale, s_min)
        _compare(torch, f"cluster vs pair {cfg} kv_len={p + 1}", out, pair.float())
