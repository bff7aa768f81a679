"""GPU tests of the tensor-core rows partial (``kern_attn_rows_partial``, ABI.md 3b′) followed
by the split-KV reduce: the rows of one sequence through permuted pages (page 0 poisoned,
scratch and output NaN first), against the float32 reference and against the CUDA-core
partial (``attn_decode_split.cu``) given the same split counts — verify's causal chunk
(``kv_lens = pos0 + t + 1``), the DSpark draft's block (every row the same length), and rows
whose split counts differ across a 512-key boundary.

Marked ``gpu``; skips cleanly without torch, cupy, a GPU or nvcc (``conftest.py``)."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _own_kernels_gpu import compare as _compare  # noqa: E402
from test_attn_gpu import CONFIGS, GEN_SPLITS, _paged_sequence, _scratch  # noqa: E402


# (S, s_min) per config: the generator's where it has one (GEN_SPLITS), else the same rule
# (s_min about 128 blocks over the kv heads, S = 4 s_min)
SPLITS = {**GEN_SPLITS, "12q2kv_d128": (256, 64), "8q1kv_d64": (256, 64),
          "4q4kv_d128": (128, 32)}


def _run(env, cfg, lens_list, s_min_arg, seed, splits=None):
    """Rows partial + reduce and the CUDA-core pair on the same inputs; returns both outputs
    and the float32 reference (row t attends to the first lens_list[t] keys)."""
    torch, ok, k = env
    n_q, n_kv, d = CONFIGS[cfg]
    S = splits or SPLITS[cfg][0]
    tokens, n_keys = len(lens_list), max(lens_list)
    scale = 1 / math.sqrt(d)
    g = torch.Generator(device="cuda").manual_seed(seed)
    _, q, q_stride = ok.make_q(torch, tokens, n_q, n_kv, d, g, "cuda")
    kc, vc, table, lk, lv, _ = _paged_sequence(env, cfg, "token_major", n_keys, tokens,
                                               seed=seed, identity=False)
    lens = torch.tensor(lens_list, dtype=torch.int32, device="cuda")
    outs = []
    for launch in (k.attn_rows_two_step, k.attn_decode_two_step):
        part_ml, part_acc, _ = _scratch(torch, tokens, n_q, n_kv, S, d)
        out = torch.full((tokens, n_q, d), float("nan"), dtype=torch.bfloat16, device="cuda")
        launch(q, q_stride, kc, vc, lens, table, part_ml, part_acc, out, n_q, n_kv, S, scale,
               tokens, s_min=s_min_arg)
        torch.cuda.synchronize()
        outs.append(out)
    ref = torch.cat([ok.ref_attention(torch, q[t:t + 1], lk[:n], lv[:n], n - 1, scale, n_q,
                                      n_kv) for t, n in enumerate(lens_list)])
    return outs[0], outs[1], ref


def _check(env, name, rows, split, ref):
    torch = env[0]
    assert not torch.isnan(rows).any(), f"{name}: NaN in the output"
    _compare(torch, f"{name} rows", rows, ref)
    _compare(torch, f"{name} cuda-core", split, ref)
    # the two kernels differ in arithmetic (bf16 P on tensor cores) but not in what they mean
    _compare(torch, f"{name} rows vs cuda-core", rows, split.float())


CHUNK_CASES = [
    # cfg, pos0, tokens, per-row minimum splits (None: the divided s_min)
    ("32q8kv_d128", 0, 1, "decode"),
    ("32q8kv_d128", 0, 8, "decode"),
    ("32q8kv_d128", 5, 8, "decode"),
    ("32q8kv_d128", 140, 8, "decode"),
    ("32q8kv_d128", 140, 8, None),
    ("32q8kv_d128", 508, 8, "decode"),      # rows straddle 512 keys
    ("32q8kv_d128", 1020, 16, "decode"),
    ("32q8kv_d128", 4090, 8, "decode"),
    ("32q8kv_d128", 9000, 2, None),
    ("32q8kv_d128", 200, 20, "decode"),     # 80 query rows: two 64-row tiles
    ("9q3kv_d64", 0, 8, "decode"),
    ("9q3kv_d64", 77, 8, "decode"),
    ("9q3kv_d64", 2040, 21, "decode"),      # 63 query rows of one kv head
    ("9q3kv_d64", 17000, 7, None),
    ("12q2kv_d128", 300, 10, "decode"),
    ("8q1kv_d64", 63, 8, "decode"),
    ("4q4kv_d128", 1, 16, 1),
]


def _s_min_arg(cfg, tokens, mode):
    """The kernels' s_min argument: the generator's (``None``: divided among the rows),
    decode's count for every row (``"decode"``: s_min · T), or N splits a row (N · T)."""
    s_min = SPLITS[cfg][1]
    if mode is None:
        return s_min
    return (s_min if mode == "decode" else mode) * tokens


@pytest.mark.gpu
@pytest.mark.parametrize("cfg,pos0,tokens,mode", CHUNK_CASES)
def test_rows_partial_causal_chunk(env, cfg, pos0, tokens, mode):
    lens = [pos0 + t + 1 for t in range(tokens)]
    rows, split, ref = _run(env, cfg, lens, _s_min_arg(cfg, tokens, mode), seed=pos0 + tokens)
    _check(env, f"rows chunk {cfg} pos0={pos0} T={tokens} {mode}", rows, split, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg,length,tokens", [("32q8kv_d128", 150, 7), ("32q8kv_d128", 7, 7),
                                               ("9q3kv_d64", 1000, 7), ("9q3kv_d64", 33, 7)])
def test_rows_partial_draft_block(env, cfg, length, tokens):
    """The DSpark draft: every row sees the same keys (non-causal inside the block)."""
    lens = [length] * tokens
    rows, split, ref = _run(env, cfg, lens, _s_min_arg(cfg, tokens, "decode"), seed=length)
    _check(env, f"rows draft {cfg} L={length} T={tokens}", rows, split, ref)


@pytest.mark.gpu
def test_rows_partial_few_splits_and_long_rows(env):
    """A small grid (S = 3) at 5000 keys: 2000-key splits, 32 tiles a block."""
    lens = [5000 + t for t in range(4)]
    rows, split, ref = _run(env, "32q8kv_d128", lens, 3 * 4, seed=3, splits=3)
    _check(env, "rows S=3 L=5000", rows, split, ref)


@pytest.mark.gpu
def test_rows_partial_is_deterministic(env):
    torch = env[0]
    lens = [140 + t + 1 for t in range(8)]
    a = _run(env, "32q8kv_d128", lens, 16 * 8, seed=9)[0]
    b = _run(env, "32q8kv_d128", lens, 16 * 8, seed=9)[0]
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))
