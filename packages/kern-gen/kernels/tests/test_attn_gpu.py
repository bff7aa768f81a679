"""GPU tests of kern's own attention kernels (ABI.md 3): the decode (two launches, the
default, and one launch) and the flash prefill, through identity and permuted page tables,
batches of sequences; outputs, scratch, unused cache slots and padding poisoned with NaN
first; compared with torch in float32.  The one-launch decode is also checked bit for bit
against the two-launch pair (``attn_decode_split.cu``) and for its arrival counters, which
every launch must leave at zero.

Every test is marked ``gpu`` and skips cleanly without torch, cupy, a GPU or nvcc (the ``env``
fixture, ``conftest.py``).  Errors are appended to ``$KERN_KERNELS_REPORT`` when that is set.
"""
from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _own_kernels_gpu import compare as _compare, report as _report  # noqa: E402


# ----------------------------------------------------------------------------- attention

CONFIGS = {"32q8kv_d128": (32, 8, 128), "9q3kv_d64": (9, 3, 64), "12q2kv_d128": (12, 2, 128),
           "8q1kv_d64": (8, 1, 64), "4q4kv_d128": (4, 4, 128), "16q8kv_d64": (16, 8, 64)}
LAYOUTS = ["slot_major_padded", "head_major", "interleaved"]
# The generator's split counts (kern_gen.llama.own: s_min = decode_splits(kv heads), S = 4 s_min)
GEN_SPLITS = {"9q3kv_d64": (128, 32), "32q8kv_d128": (64, 16)}


def _attn_inputs(torch, _own_kernels_gpu, cfg, layout, tokens, pos0, seed):
    """One sequence of pos0 + tokens keys at slot = position (an identity page table)."""
    n_q, n_kv, d = CONFIGS[cfg]
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(seed)
    length = pos0 + tokens
    slots = length + 37                      # slots beyond the context stay NaN
    pool, kc, vc = _own_kernels_gpu.make_cache(torch, layout, slots, n_kv, d, length, g, dev)
    qkv, q, q_stride = _own_kernels_gpu.make_q(torch, tokens, n_q, n_kv, d, g, dev)
    pos = torch.tensor([pos0], dtype=torch.int32, device=dev)
    return n_q, n_kv, d, pool, kc, vc, qkv, q, q_stride, pos


def _scratch(torch, tokens, n_q, n_kv, splits, d):
    """NaN-poisoned part_ml, part_acc and zeroed counters (what kern-runtime's load leaves)."""
    nan = float("nan")
    part_ml = torch.full((tokens, n_q, splits, 2), nan, dtype=torch.float32, device="cuda")
    part_acc = torch.full((tokens, n_q, splits, d), nan, dtype=torch.float32, device="cuda")
    counters = torch.zeros((tokens, n_kv), dtype=torch.int32, device="cuda")
    return part_ml, part_acc, counters


def _decode(torch, k, q, q_stride, kc, vc, kv_lens, table, n_q, n_kv, splits, scale,
            s_min=None, scratch=None):
    """The one-launch decode on NaN-initialised scratch (or ``scratch``, reused) and output;
    checks the counters are back to zero; returns out [T, n_q, d]."""
    tokens, d = q.shape[0], kc.shape[-1]
    part_ml, part_acc, counters = scratch or _scratch(torch, tokens, n_q, n_kv, splits, d)
    out = torch.full((tokens, n_q, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    k.attn_decode(q, q_stride, kc, vc, kv_lens, table, part_ml, part_acc, counters, out, n_q,
                  n_kv, splits, scale, tokens, s_min=s_min)
    torch.cuda.synchronize()
    assert not counters.any(), f"counters left non-zero: {counters.nonzero().tolist()[:8]}"
    return out


def _decode_two_step(torch, k2, q, q_stride, kc, vc, kv_lens, table, n_q, n_kv, splits, scale,
                     s_min=None):
    """The two-launch pair (``attn_decode_split.cubin``), NaN-initialised scratch and out."""
    tokens, d = q.shape[0], kc.shape[-1]
    part_ml, part_acc, _ = _scratch(torch, tokens, n_q, n_kv, splits, d)
    out = torch.full((tokens, n_q, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    k2.attn_decode_two_step(q, q_stride, kc, vc, kv_lens, table, part_ml, part_acc, out, n_q,
                            n_kv, splits, scale, tokens, s_min=s_min)
    torch.cuda.synchronize()
    return out


def _same_bits(torch, name, a, b):
    """a and b hold the same bf16 bits (not merely equal values: -0 vs +0 counts)."""
    same = a.view(torch.int16) == b.view(torch.int16)
    if not bool(same.all()):
        diff = (a.float() - b.float()).abs().max().item()
        _report(f"{name}: {int((~same).sum())} of {same.numel()} bf16 values differ, "
                f"max |diff| {diff:.3e}")
        raise AssertionError(f"{name}: {int((~same).sum())} values differ (max {diff})")


def _prefill(torch, k, q, q_stride, kc, vc, pos, table, n_q, n_kv, scale):
    tokens, d = q.shape[0], kc.shape[-1]
    out = torch.full((tokens, n_q, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    k.attn_prefill(q, q_stride, kc, vc, pos, table, out, n_q, n_kv, tokens, scale)
    torch.cuda.synchronize()
    return out


# -------------------------------------------------- single sequence, identity page table
# (batch 1: key j at slot j, kv_lens = pos0 + t + 1 — the pre-paging semantics), on several
# cache layouts

DECODE_CASES = [
    # cfg, layout, tokens, pos0, splits, scale_mul
    ("32q8kv_d128", "slot_major_padded", 1, 0, 48, 1.0),
    ("32q8kv_d128", "slot_major_padded", 1, 511, 48, 1.0),
    ("32q8kv_d128", "head_major", 1, 2047, 48, 1.0),
    ("32q8kv_d128", "interleaved", 1, 4095, 48, 1.0),
    ("32q8kv_d128", "slot_major_padded", 1, 4095, 1, 1.0),
    ("32q8kv_d128", "head_major", 7, 300, 48, 1.0),
    ("32q8kv_d128", "interleaved", 1, 100, 200, 4.0),
    ("9q3kv_d64", "slot_major_padded", 1, 0, 128, 1.0),
    ("9q3kv_d64", "head_major", 1, 1000, 128, 1.0),
    ("9q3kv_d64", "interleaved", 7, 64, 13, 1.0),
    ("9q3kv_d64", "slot_major_padded", 1, 4095, 128, 4.0),
    ("12q2kv_d128", "head_major", 1, 777, 48, 1.0),
    ("12q2kv_d128", "interleaved", 7, 5, 16, 1.0),
    ("8q1kv_d64", "slot_major_padded", 1, 2999, 64, 1.0),
    ("4q4kv_d128", "interleaved", 1, 1, 2, 1.0),
    ("16q8kv_d64", "head_major", 64, 200, 32, 1.0),
]


@pytest.mark.gpu
@pytest.mark.parametrize("cfg,layout,tokens,pos0,splits,scale_mul", DECODE_CASES)
def test_attn_decode(env, cfg, layout, tokens, pos0, splits, scale_mul):
    _decode_case(env, cfg, layout, tokens, pos0, splits, scale_mul, None,
                 seed=pos0 * 31 + tokens + splits)


def _decode_case(env, cfg, layout, tokens, pos0, splits, scale_mul, s_min, seed):
    """The split-KV decode attention (grid S = ``splits``, at least ``s_min`` per row; None:
    always S) of a ``tokens``-row chunk at pos0 through an identity table, against the
    float32 reference."""
    torch, _own_kernels_gpu, k = env
    n_q, n_kv, d, pool, kc, vc, qkv, q, q_stride, pos = _attn_inputs(
        torch, _own_kernels_gpu, cfg, layout, tokens, pos0, seed=seed)
    scale = scale_mul / math.sqrt(d)
    table = _own_kernels_gpu.identity_table(torch, tokens, pos0 + tokens, "cuda")
    lens = _own_kernels_gpu.causal_kv_lens(torch, pos0, tokens, "cuda")
    out = _decode(torch, k, q, q_stride, kc, vc, lens, table, n_q, n_kv, splits, scale, s_min)
    ref = _own_kernels_gpu.ref_attention(torch, q, kc, vc, pos0, scale, n_q, n_kv)
    _compare(torch, f"decode {cfg} {layout} T={tokens} pos0={pos0} S={splits} s_min={s_min} "
                    f"scale={scale_mul}/sqrt(d)", out, ref)


# The split count following the context (grid S, at least s_min): rows of short contexts use
# s_min splits, long ones up to S; verify-like multi-row calls straddle the switch.
ADAPTIVE_CASES = [
    # cfg, layout, tokens, pos0, S, s_min
    ("32q8kv_d128", "slot_major_padded", 1, 1023, 64, 16),
    ("32q8kv_d128", "slot_major_padded", 1, 2998, 64, 16),
    ("32q8kv_d128", "token_major", 1, 30000, 64, 16),
    ("32q8kv_d128", "slot_major_padded", 8, 8188, 64, 16),
    ("9q3kv_d64", "token_major", 1, 20000, 128, 32),
    ("9q3kv_d64", "interleaved", 5, 16382, 128, 32),
]


@pytest.mark.gpu
@pytest.mark.parametrize("cfg,layout,tokens,pos0,splits,s_min", ADAPTIVE_CASES)
def test_attn_decode_adaptive_splits(env, cfg, layout, tokens, pos0, splits, s_min):
    _decode_case(env, cfg, layout, tokens, pos0, splits, 1.0, s_min, seed=pos0 + tokens)


PREFILL_CASES = [
    # cfg, layout, tokens, pos0, scale_mul
    ("32q8kv_d128", "slot_major_padded", 1, 0, 1.0),
    ("32q8kv_d128", "slot_major_padded", 7, 0, 1.0),
    ("32q8kv_d128", "head_major", 64, 0, 1.0),
    ("32q8kv_d128", "interleaved", 300, 0, 1.0),
    ("32q8kv_d128", "slot_major_padded", 300, 37, 1.0),
    ("32q8kv_d128", "head_major", 65, 1000, 4.0),
    ("32q8kv_d128", "interleaved", 512, 512, 1.0),
    ("32q8kv_d128", "slot_major_padded", 2048, 0, 1.0),
    ("32q8kv_d128", "head_major", 2048, 2048, 1.0),
    ("9q3kv_d64", "slot_major_padded", 1, 0, 1.0),
    ("9q3kv_d64", "head_major", 7, 3, 1.0),
    ("9q3kv_d64", "interleaved", 64, 64, 1.0),
    ("9q3kv_d64", "slot_major_padded", 300, 1111, 4.0),
    ("9q3kv_d64", "head_major", 2048, 0, 1.0),
    ("12q2kv_d128", "interleaved", 130, 17, 1.0),
    ("8q1kv_d64", "slot_major_padded", 100, 0, 1.0),
    ("4q4kv_d128", "head_major", 33, 63, 1.0),
]


@pytest.mark.gpu
@pytest.mark.parametrize("cfg,layout,tokens,pos0,scale_mul", PREFILL_CASES)
def test_attn_prefill(env, cfg, layout, tokens, pos0, scale_mul):
    torch, _own_kernels_gpu, k = env
    n_q, n_kv, d, pool, kc, vc, qkv, q, q_stride, pos = _attn_inputs(
        torch, _own_kernels_gpu, cfg, layout, tokens, pos0, seed=pos0 * 17 + tokens)
    scale = scale_mul / math.sqrt(d)
    table = _own_kernels_gpu.identity_table(torch, 1, pos0 + tokens, "cuda")
    out = _prefill(torch, k, q, q_stride, kc, vc, pos, table, n_q, n_kv, scale)
    ref = _own_kernels_gpu.ref_attention(torch, q, kc, vc, pos0, scale, n_q, n_kv)
    _compare(torch, f"prefill {cfg} {layout} T={tokens} pos0={pos0} scale={scale_mul}/sqrt(d)",
             out, ref)


@pytest.mark.gpu
def test_decode_and_prefill_agree_on_a_chunk(env):
    """The same 7-row chunk through both impls (the decode kernel accepts T > 1)."""
    torch, _own_kernels_gpu, k = env
    n_q, n_kv, d, pool, kc, vc, qkv, q, q_stride, pos = _attn_inputs(
        torch, _own_kernels_gpu, "32q8kv_d128", "head_major", 7, 900, seed=5)
    scale = 1 / math.sqrt(d)
    table = _own_kernels_gpu.identity_table(torch, 7, 907, "cuda")
    lens = _own_kernels_gpu.causal_kv_lens(torch, 900, 7, "cuda")
    a = _decode(torch, k, q, q_stride, kc, vc, lens, table, n_q, n_kv, 48, scale)
    b = _prefill(torch, k, q, q_stride, kc, vc, pos, table, n_q, n_kv, scale)
    _compare(torch, "decode vs prefill T=7 pos0=900", a, b.float())


@pytest.mark.gpu
def test_reference_matches_sdpa(env):
    """Sanity check of the float32 reference itself against torch SDPA (pos0 = 0, causal)."""
    torch, _own_kernels_gpu, k = env
    F = torch.nn.functional
    n_q, n_kv, d, pool, kc, vc, qkv, q, q_stride, pos = _attn_inputs(
        torch, _own_kernels_gpu, "32q8kv_d128", "head_major", 100, 0, seed=1)
    ref = _own_kernels_gpu.ref_attention(torch, q, kc, vc, 0, 1 / math.sqrt(d), n_q, n_kv)
    qq = q.float().reshape(100, n_q, d).transpose(0, 1)[None]
    kk = kc[:100].float().transpose(0, 1)[None].repeat_interleave(n_q // n_kv, dim=1)
    vv = vc[:100].float().transpose(0, 1)[None].repeat_interleave(n_q // n_kv, dim=1)
    sd = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)[0].transpose(0, 1)
    assert (sd - ref).abs().max().item() < 1e-3


@pytest.mark.gpu
def test_decode_grid_fixed_kv_lens_from_device_memory(env):
    """One set of launch arguments, kv_lens changed only in device memory (graph replay)."""
    torch, _own_kernels_gpu, k = env
    n_q, n_kv, d, pool, kc, vc, qkv, q, q_stride, pos = _attn_inputs(
        torch, _own_kernels_gpu, "9q3kv_d64", "slot_major_padded", 1, 600, seed=9)
    scale = 1 / math.sqrt(d)
    table = _own_kernels_gpu.identity_table(torch, 1, 601, "cuda")
    lens = torch.zeros((1,), dtype=torch.int32, device="cuda")
    scratch = _scratch(torch, 1, n_q, n_kv, 128, d)       # one scratch (and counters) for all
    for p in (0, 1, 127, 128, 129, 600):
        lens.fill_(p + 1)
        out = _decode(torch, k, q, q_stride, kc, vc, lens, table, n_q, n_kv, 128, scale,
                      scratch=scratch)
        ref = _own_kernels_gpu.ref_attention(torch, q, kc, vc, p, scale, n_q, n_kv)
        _compare(torch, f"decode replay-style kv_len={p + 1}", out, ref)


# -------------------------------------------------- paged pool: permuted pages, batches
# Pages are drawn without replacement from pages 1.. of one pool; page 0 is poisoned (huge K,
# NaN V) and never referenced, every slot no sequence owns is NaN, and table entries past a
# row's pages point at page 0: reading any key >= kv_lens[t] shows up in the output.

EDGE_LENGTHS = [1, 15, 16, 17, 31, 32, 33, 4095]


def _lengths(spec: tuple, gen_seed: int) -> list[int]:
    """(rows, longest random length, extra lengths): the edges, then the extras, then random
    lengths in [1, longest] up to ``rows`` rows, shuffled (deterministic per seed)."""
    rows, longest, extra = spec
    rnd = random.Random(gen_seed)
    lens = (EDGE_LENGTHS + list(extra))[:rows]
    lens += [rnd.randint(1, longest) for _ in range(rows - len(lens))]
    rnd.shuffle(lens)
    return lens


def _paged_batch(env, cfg, layout, lengths, seed, contiguous=False):
    """One decode row per sequence, pages permuted (page 0 poisoned) or consecutive: returns
    (q, q_stride, kc, vc, table, kv_lens, logical [(k, v) per sequence], pool)."""
    torch, ok, k = env
    n_q, n_kv, d = CONFIGS[cfg]
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(seed)
    # the data first, so that it does not depend on `contiguous` (which draws no pages)
    logical = [ok.random_kv(torch, n, n_kv, d, g, dev) for n in lengths]
    qkv, q, q_stride = ok.make_q(torch, len(lengths), n_q, n_kv, d, g, dev)
    n_pages = sum(ok.pages_for(n) for n in lengths) + 5
    pool, kc, vc = ok.paged_pool(torch, layout, n_pages, n_kv, d, g, dev)
    if contiguous:
        pages = ok.contiguous_pages(torch, lengths, dev)
    else:
        ok.poison_page0(torch, kc, vc)
        pages = ok.random_pages(torch, lengths, n_pages, g)
    for p, (lk, lv) in zip(pages, logical):
        ok.write_sequence(torch, kc, vc, p, lk, lv)
    table = ok.table_of(torch, pages, dev, width=ok.pages_for(max(lengths)) + 2)
    lens = torch.tensor(lengths, dtype=torch.int32, device=dev)
    return q, q_stride, kc, vc, table, lens, logical, pool


def _ref_rows(torch, ok, q, logical, scale, n_q, n_kv):
    """Row t attends to all keys of its own sequence logical[t]."""
    return torch.cat([ok.ref_attention(torch, q[t:t + 1], lk, lv, lk.shape[0] - 1, scale,
                                       n_q, n_kv) for t, (lk, lv) in enumerate(logical)])


PAGED_DECODE_CASES = [
    # cfg, layout, (rows, longest random length, extra lengths)
    ("9q3kv_d64", "token_major", (8, 1, ())),
    ("9q3kv_d64", "token_major", (64, 2048, (16384, 20000))),
    ("9q3kv_d64", "interleaved", (256, 600, (4096, 777))),
    ("32q8kv_d128", "token_major", (8, 1, ())),
    ("32q8kv_d128", "token_major", (64, 2048, (8192, 9001))),
    ("32q8kv_d128", "slot_major_padded", (256, 600, (4096, 777))),
    ("32q8kv_d128", "head_major", (3, 1, ())),
]


@pytest.mark.gpu
@pytest.mark.parametrize("cfg,layout,spec", PAGED_DECODE_CASES)
def test_attn_decode_paged_batch(env, cfg, layout, spec):
    """B rows of B sequences of different lengths (1 .. 20000) through permuted pages, with
    the generator's split counts (more than s_min splits for the longest rows)."""
    torch, ok, k = env
    lengths = _lengths(spec, gen_seed=spec[0] * 7 + len(spec[2]))
    q, q_stride, kc, vc, table, lens, logical, _ = _paged_batch(
        env, cfg, layout, lengths, seed=len(lengths) + spec[1])
    n_q, n_kv, d = CONFIGS[cfg]
    S, s_min = GEN_SPLITS[cfg]
    scale = 1 / math.sqrt(d)
    out = _decode(torch, k, q, q_stride, kc, vc, lens, table, n_q, n_kv, S, scale, s_min)
    ref = _ref_rows(torch, ok, q, logical, scale, n_q, n_kv)
    _compare(torch, f"paged decode {cfg} {layout} B={len(lengths)} "
                    f"lens={sorted(set(lengths))[:4]}..{max(lengths)}", out, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", ["9q3kv_d64", "32q8kv_d128"])
def test_attn_decode_paged_batch_bit_identical_to_contiguous_pages(env, cfg):
    """The same sequences through permuted pages and through consecutive pages give the same
    bits: where a page lies does not enter the arithmetic."""
    torch, ok, k = env
    lengths = _lengths((48, 1500, (5000,)), gen_seed=3)
    n_q, n_kv, d = CONFIGS[cfg]
    S, s_min = GEN_SPLITS[cfg]
    scale = 1 / math.sqrt(d)
    outs = []
    for contiguous in (False, True):
        q, q_stride, kc, vc, table, lens, logical, _ = _paged_batch(
            env, cfg, "token_major", lengths, seed=11, contiguous=contiguous)
        outs.append(_decode(torch, k, q, q_stride, kc, vc, lens, table, n_q, n_kv, S, scale,
                            s_min))
    assert torch.equal(outs[0], outs[1])
    _compare(torch, f"paged decode {cfg} B=48 (contiguous pages)", outs[1],
             _ref_rows(torch, ok, q, logical, scale, n_q, n_kv))


def _paged_sequence(env, cfg, layout, n_keys, rows, seed, identity):
    """One sequence of n_keys keys, in a pool either at slot = key (identity table) or
    through permuted pages; the table has ``rows`` rows, all the sequence's pages (what the
    decode kernel reads: a chunk's rows share the sequence).  Returns (kc, vc, table, lk, lv)."""
    torch, ok, k = env
    n_q, n_kv, d = CONFIGS[cfg]
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(seed)
    lk, lv = ok.random_kv(torch, n_keys, n_kv, d, g, dev)
    n_pages = ok.pages_for(n_keys) + 4
    pool, kc, vc = ok.paged_pool(torch, layout, n_pages, n_kv, d, g, dev)
    if identity:
        pages = ok.contiguous_pages(torch, [n_keys], dev)[0]
    else:
        ok.poison_page0(torch, kc, vc)
        pages = ok.random_pages(torch, [n_keys], n_pages, g)[0]
    ok.write_sequence(torch, kc, vc, pages, lk, lv)
    table = ok.table_of(torch, [pages] * rows, dev, width=len(pages) + 3)
    return kc, vc, table, lk, lv, pool


SEQUENCE_DECODE_CASES = [
    # cfg, pos0, tokens (rows t at pos0 + t: kv_lens = pos0 + t + 1)
    ("9q3kv_d64", 0, 1),
    ("9q3kv_d64", 4000, 8),
    ("9q3kv_d64", 17000, 3),
    ("32q8kv_d128", 14, 16),
    ("32q8kv_d128", 100, 16),
    ("32q8kv_d128", 9000, 1),
]


@pytest.mark.gpu
@pytest.mark.parametrize("cfg,pos0,tokens", SEQUENCE_DECODE_CASES)
def test_attn_decode_paged_chunk_matches_identity_table(env, cfg, pos0, tokens):
    """The pre-paging semantics (a chunk of one sequence, kv_lens = pos0 + t + 1): permuted
    pages and an identity table holding the same K/V give the same bits, and both match the
    reference."""
    torch, ok, k = env
    n_q, n_kv, d = CONFIGS[cfg]
    S, s_min = GEN_SPLITS[cfg]
    scale = 1 / math.sqrt(d)
    g = torch.Generator(device="cuda").manual_seed(pos0 + 1)
    qkv, q, q_stride = ok.make_q(torch, tokens, n_q, n_kv, d, g, "cuda")
    lens = ok.causal_kv_lens(torch, pos0, tokens, "cuda")
    outs = []
    for identity in (True, False):
        kc, vc, table, lk, lv, _ = _paged_sequence(env, cfg, "token_major", pos0 + tokens,
                                                   tokens, seed=pos0, identity=identity)
        outs.append(_decode(torch, k, q, q_stride, kc, vc, lens, table, n_q, n_kv, S, scale,
                            s_min))
    assert torch.equal(outs[0], outs[1])
    ref = ok.ref_attention(torch, q, lk, lv, pos0, scale, n_q, n_kv)
    _compare(torch, f"paged decode chunk {cfg} pos0={pos0} T={tokens}", outs[1], ref)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", ["9q3kv_d64", "32q8kv_d128"])
@pytest.mark.parametrize("pos0", [0, 5, 16, 1000])
@pytest.mark.parametrize("tokens", [1, 17, 64, 200])
def test_attn_prefill_paged(env, cfg, pos0, tokens):
    """A prefill chunk through permuted pages (row 0 of the table; the other rows point at the
    poisoned page and must not be read), contexts crossing page and tile boundaries."""
    torch, ok, k = env
    n_q, n_kv, d = CONFIGS[cfg]
    scale = 1 / math.sqrt(d)
    g = torch.Generator(device="cuda").manual_seed(pos0 * 3 + tokens)
    qkv, q, q_stride = ok.make_q(torch, tokens, n_q, n_kv, d, g, "cuda")
    pos = torch.tensor([pos0], dtype=torch.int32, device="cuda")
    kc, vc, table, lk, lv, _ = _paged_sequence(env, cfg, "token_major", pos0 + tokens, tokens,
                                               seed=pos0 + tokens, identity=False)
    table[1:] = 0
    out = _prefill(torch, k, q, q_stride, kc, vc, pos, table, n_q, n_kv, scale)
    ref = ok.ref_attention(torch, q, lk, lv, pos0, scale, n_q, n_kv)
    _compare(torch, f"paged prefill {cfg} pos0={pos0} T={tokens}", out, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg,layout,pos0,tokens", [
    ("9q3kv_d64", "interleaved", 37, 300),
    ("32q8kv_d128", "slot_major_padded", 1000, 130),
    ("32q8kv_d128", "token_major", 0, 2048)])
def test_attn_prefill_paged_bit_identical_to_identity_table(env, cfg, layout, pos0, tokens):
    """A chunk of one sequence through permuted pages gives the bits of an identity table
    holding the same K/V (and matches the reference)."""
    torch, ok, k = env
    n_q, n_kv, d = CONFIGS[cfg]
    scale = 1 / math.sqrt(d)
    g = torch.Generator(device="cuda").manual_seed(tokens)
    qkv, q, q_stride = ok.make_q(torch, tokens, n_q, n_kv, d, g, "cuda")
    pos = torch.tensor([pos0], dtype=torch.int32, device="cuda")
    outs = []
    for identity in (True, False):
        kc, vc, table, lk, lv, _ = _paged_sequence(env, cfg, layout, pos0 + tokens, 1,
                                                   seed=pos0, identity=identity)
        outs.append(_prefill(torch, k, q, q_stride, kc, vc, pos, table, n_q, n_kv, scale))
    assert torch.equal(outs[0], outs[1])
    ref = ok.ref_attention(torch, q, lk, lv, pos0, scale, n_q, n_kv)
    _compare(torch, f"paged prefill {cfg} {layout} pos0={pos0} T={tokens} (identity)",
             outs[1], ref)


# -------------------------------------------------- one launch: bits, counters, replays
# The one-launch decode must give the bits of the former two launches (same arithmetic, the
# merge in split order whichever block arrives last), leave its counters at zero and give the
# same bits when the same launch runs again on the same scratch.

BIT_CASES = ([(c, lay, t, p, s, None, sm) for c, lay, t, p, s, sm in DECODE_CASES] +
             [(c, lay, t, p, s, s_min, 1.0) for c, lay, t, p, s, s_min in ADAPTIVE_CASES])


@pytest.mark.gpu
@pytest.mark.parametrize("cfg,layout,tokens,pos0,splits,s_min,scale_mul", BIT_CASES)
def test_attn_decode_bits_equal_two_launches(env, cfg, layout, tokens, pos0, splits,
                                             s_min, scale_mul):
    torch, ok, k = env
    n_q, n_kv, d, pool, kc, vc, qkv, q, q_stride, pos = _attn_inputs(
        torch, ok, cfg, layout, tokens, pos0, seed=pos0 * 13 + tokens + splits)
    scale = scale_mul / math.sqrt(d)
    table = ok.identity_table(torch, tokens, pos0 + tokens, "cuda")
    lens = ok.causal_kv_lens(torch, pos0, tokens, "cuda")
    args = (q, q_stride, kc, vc, lens, table, n_q, n_kv, splits, scale, s_min)
    _same_bits(torch, f"1 vs 2 launches {cfg} {layout} T={tokens} pos0={pos0} S={splits} "
                      f"s_min={s_min}", _decode(torch, k, *args),
               _decode_two_step(torch, k, *args))


@pytest.mark.gpu
@pytest.mark.parametrize("cfg,layout,spec", PAGED_DECODE_CASES)
def test_attn_decode_paged_batch_bits_equal_two_launches(env, cfg, layout, spec):
    torch, ok, k = env
    lengths = _lengths(spec, gen_seed=spec[0] * 5 + 1)
    q, q_stride, kc, vc, table, lens, logical, _ = _paged_batch(env, cfg, layout, lengths,
                                                                seed=len(lengths) + 3)
    n_q, n_kv, d = CONFIGS[cfg]
    S, s_min = GEN_SPLITS[cfg]
    args = (q, q_stride, kc, vc, lens, table, n_q, n_kv, S, 1 / math.sqrt(d), s_min)
    _same_bits(torch, f"1 vs 2 launches paged {cfg} B={len(lengths)}",
               _decode(torch, k, *args), _decode_two_step(torch, k, *args))


# rows of a batch: direct (A = 1) and merged rows, short rows with empty splits, long rows
# past the minimum split count, in one launch
MANY_ROWS = [1, 15, 16, 17, 31, 32, 33, 511, 512, 513, 1024, 4095, 8193, 20000]


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", ["9q3kv_d64", "32q8kv_d128"])
@pytest.mark.parametrize("rows", [4, 40, 200])
def test_attn_decode_many_rows_of_varying_lengths(env, cfg, rows):
    """``rows`` sequences of lengths 1 .. 20000 in one launch (the per-row split count
    A = clamp(ceil(L / 512), s_min / rows, S) ranges from 1 to 40 here), through permuted
    pages: matches the reference, the bits of the two launches, and itself when run again on
    the same scratch (the counters back at zero after each launch)."""
    torch, ok, k = env
    rnd = random.Random(rows)
    head = MANY_ROWS if rows >= len(MANY_ROWS) else [1, 513, 4095, 20000][:rows]
    lengths = head + [rnd.randint(1, 3000) for _ in range(rows - len(head))]
    rnd.shuffle(lengths)
    q, q_stride, kc, vc, table, lens, logical, _ = _paged_batch(env, cfg, "token_major",
                                                                lengths, seed=rows)
    n_q, n_kv, d = CONFIGS[cfg]
    S, s_min = GEN_SPLITS[cfg]
    scale = 1 / math.sqrt(d)
    scratch = _scratch(torch, rows, n_q, n_kv, S, d)
    args = (q, q_stride, kc, vc, lens, table, n_q, n_kv, S, scale, s_min)
    first = _decode(torch, k, *args, scratch=scratch)
    again = _decode(torch, k, *args, scratch=scratch)
    name = f"many rows {cfg} B={rows} lens {min(lengths)}..{max(lengths)}"
    _same_bits(torch, name + " (run twice)", first, again)
    _same_bits(torch, name + " (1 vs 2 launches)", first,
               _decode_two_step(torch, k, *args))
    _compare(torch, name, first, _ref_rows(torch, ok, q, logical, scale, n_q, n_kv))


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", ["9q3kv_d64", "32q8kv_d128"])
def test_attn_decode_same_launch_twice_and_replays(env, cfg):
    """One set of launch arguments and one scratch (counters included), as a captured graph
    replays them: the same launch twice (4095 keys, 16 / 32 splits) gives the same bits; then,
    with s_min = 1, kv_lens changes in device memory so that the row's split count goes
    1 -> 4 -> 18 -> 1 -> 2 -> 1 (the direct path and the merge on one set of counters) and
    each result matches the reference."""
    torch, ok, k = env
    n_q, n_kv, d, pool, kc, vc, qkv, q, q_stride, pos = _attn_inputs(
        torch, ok, cfg, "token_major", 1, 9000, seed=4)
    scale = 1 / math.sqrt(d)
    table = ok.identity_table(torch, 1, 9001, "cuda")
    S, s_min = GEN_SPLITS[cfg]
    lens = torch.full((1,), 4095, dtype=torch.int32, device="cuda")
    scratch = _scratch(torch, 1, n_q, n_kv, S, d)
    a = _decode(torch, k, q, q_stride, kc, vc, lens, table, n_q, n_kv, S, scale, s_min,
                scratch=scratch)
    b = _decode(torch, k, q, q_stride, kc, vc, lens, table, n_q, n_kv, S, scale, s_min,
                scratch=scratch)
    _same_bits(torch, f"same launch twice {cfg}", a, b)
    for n in (300, 2000, 9001, 1, 513, 300):
        lens.fill_(n)
        out = _decode(torch, k, q, q_stride, kc, vc, lens, table, n_q, n_kv, S, scale, 1,
                      scratch=scratch)
        _compare(torch, f"replay {cfg} kv_len={n} s_min=1", out,
                 ok.ref_attention(torch, q, kc, vc, n - 1, scale, n_q, n_kv))
