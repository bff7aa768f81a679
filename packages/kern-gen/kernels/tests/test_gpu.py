"""GPU tests of kern's own small kernels (embedding, argmax, the Markov step): load the cubins with cupy,
launch them with the flat ABI of ABI.md on random inputs (outputs poisoned with NaN first),
compare with torch in float32.  The attention kernels are in ``test_attn_gpu.py``, the GEMV
in ``test_gemv_gpu.py``; the ``env`` fixture is in ``conftest.py``.

Every test is marked ``gpu`` and skips cleanly without torch, cupy, a GPU or nvcc.  Errors
are appended to ``$KERN_KERNELS_REPORT`` when that is set (device_check.sh shows them).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _own_kernels_gpu import compare as _compare, report as _report  # noqa: E402


# ----------------------------------------------------------------------------- embedding

@pytest.mark.gpu
@pytest.mark.parametrize("tokens,vocab,hidden", [(1, 1000, 64), (7, 49152, 576),
                                                 (300, 151936, 2560), (2048, 5000, 2560)])
def test_embedding(env, tokens, vocab, hidden):
    torch, _own_kernels_gpu, k = env
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(tokens * 7 + hidden)
    table = torch.randn((vocab, hidden), generator=g, device=dev).to(torch.bfloat16)
    ids = torch.randint(0, vocab, (tokens,), generator=g, device=dev, dtype=torch.int64)
    ids[0] = vocab - 1
    out = torch.full((tokens, hidden), float("nan"), dtype=torch.bfloat16, device=dev)
    k.embedding(ids, table, out)
    torch.cuda.synchronize()
    assert torch.equal(out, torch.nn.functional.embedding(ids, table))


@pytest.mark.gpu
def test_embedding_out_of_range_ids_give_zero_rows(env):
    torch, _own_kernels_gpu, k = env
    dev = "cuda"
    table = torch.randn((100, 64), device=dev).to(torch.bfloat16)
    ids = torch.tensor([3, -1, 100, 1 << 40, 99], dtype=torch.int64, device=dev)
    out = torch.full((5, 64), float("nan"), dtype=torch.bfloat16, device=dev)
    k.embedding(ids, table, out)
    torch.cuda.synchronize()
    assert torch.equal(out[0], table[3]) and torch.equal(out[4], table[99])
    assert (out[1:4] == 0).all()


# ----------------------------------------------------------------------------- argmax

def _run_argmax(torch, k, logits, parts, vocab=None):
    rows = logits.shape[0]
    dev = logits.device
    pv = torch.full((rows, parts), float("nan"), dtype=torch.float32, device=dev)
    pi = torch.full((rows, parts), -7, dtype=torch.int32, device=dev)
    out = torch.full((rows,), -5, dtype=torch.int64, device=dev)
    k.argmax(logits, pv, pi, out, parts, vocab)
    torch.cuda.synchronize()
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("rows,vocab,parts", [(1, 151936, 64), (8, 151936, 64), (3, 49152, 64),
                                              (2, 1000, 7), (4, 37, 64), (1, 5, 3),
                                              (5, 151937, 64), (1, 1, 64)])
def test_argmax_random(env, rows, vocab, parts):
    torch, _own_kernels_gpu, k = env
    g = torch.Generator(device="cuda").manual_seed(rows * 1000 + vocab)
    logits = (torch.randn((rows, vocab), generator=g, device="cuda") * 3).to(torch.bfloat16)
    got = _run_argmax(torch, k, logits, parts)
    assert torch.equal(got, torch.argmax(logits, dim=-1))


@pytest.mark.gpu
def test_argmax_ties_nan_inf(env):
    torch, _own_kernels_gpu, k = env
    vocab = 151936
    logits = torch.zeros((6, vocab), dtype=torch.bfloat16, device="cuda")
    logits[0, 100000] = 5.0; logits[0, 77] = 5.0; logits[0, 150000] = 5.0    # tie → 77
    logits[1, 1234] = float("nan"); logits[1, 99] = float("inf"); logits[1, 50000] = float("nan")
    logits[2] = float("-inf")                                                # all -inf → 0
    logits[3, :] = -1.0; logits[3, vocab - 1] = 0.5                          # last column
    logits[4, :] = -0.0; logits[4, 3] = 0.0                                  # -0 == +0 → 0
    logits[5, 2375] = 1.0; logits[5, 2376] = 1.0                             # across parts
    got = _run_argmax(torch, k, logits, 64)
    want = torch.argmax(logits, dim=-1)
    assert torch.equal(got, want), (got.tolist(), want.tolist())
    assert got.tolist() == [77, 1234, 0, vocab - 1, 0, 2375]


@pytest.mark.gpu
def test_argmax_unaligned_view_uses_scalar_path(env):
    torch, _own_kernels_gpu, k = env
    base = torch.randn((3 * 4096 + 1,), device="cuda").to(torch.bfloat16)
    logits = base[1:].view(3, 4096)          # 2-byte misaligned rows
    got = _run_argmax(torch, k, logits, 64)
    assert torch.equal(got, torch.argmax(logits, dim=-1))


# ----------------------------------------------------------------------- Markov step (2a)

def _markov_case(torch, vocab, rank, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w1 = (torch.randn((vocab, rank), generator=g, device="cuda") * 0.5).to(torch.bfloat16)
    w2 = (torch.randn((vocab, rank), generator=g, device="cuda") * 0.5).to(torch.bfloat16)
    logits = (torch.randn((vocab,), generator=g, device="cuda") * 3).to(torch.bfloat16)
    return w1, w2, logits


def _run_markov(torch, k, prev, w1, w2, logits, parts):
    pv = torch.full((parts,), float("nan"), dtype=torch.float32, device="cuda")
    pi = torch.full((parts,), -7, dtype=torch.int32, device="cuda")
    out = torch.full((1,), -5, dtype=torch.int64, device="cuda")
    k.markov(torch.tensor([prev], dtype=torch.int64, device="cuda"), w1, w2, logits, pv, pi,
             out, parts)
    torch.cuda.synchronize()
    return int(out[0])


@pytest.mark.gpu
@pytest.mark.parametrize("vocab,rank,parts", [(151936, 64, 512), (49152, 64, 512),
                                              (1000, 8, 512), (37, 16, 7), (5000, 256, 64)])
def test_markov_step_is_the_argmax_of_the_summed_row(env, vocab, rank, parts):
    """Against float64: the row bf16(logits + w2 · w1[prev]) (one rounding), its argmax; the
    kernel's f32 dot may round a value to the neighbouring bf16, so a different column is
    accepted only within one bf16 step of the reference maximum (reported)."""
    torch, _own_kernels_gpu, k = env
    for seed, prev in ((vocab + rank, 0), (7, vocab - 1), (11, vocab // 3)):
        w1, w2, logits = _markov_case(torch, vocab, rank, seed)
        ref = (logits.double() + w2.double() @ w1[prev].double()).to(torch.bfloat16).double()
        got = _run_markov(torch, k, prev, w1, w2, logits, parts)
        want = int(torch.argmax(ref))
        if got != want:
            gap = float(ref[want] - ref[got])
            _report(f"markov vocab {vocab} rank {rank}: column {got} vs {want}, gap {gap:.3g}")
            assert gap <= abs(float(ref[want])) * 2 ** -7, (got, want, gap)


@pytest.mark.gpu
def test_markov_step_out_of_range_prev_adds_nothing(env):
    torch, _own_kernels_gpu, k = env
    w1, w2, logits = _markov_case(torch, 4096, 64, 3)
    for prev in (-1, 4096, 1 << 40):
        assert _run_markov(torch, k, prev, w1, w2, logits, 512) == int(torch.argmax(logits))


# ------------------------------------------------------------------- acceptance step (6)

def _accept_reference(ids, preds, p, block, mask):
    """docs/dspark.md step 7 in plain Python: j, then the four next-round arrays."""
    j = next((i for i in range(len(ids) - 1) if ids[i + 1] != preds[i]), len(ids) - 1)
    q = p + j + 1
    return ([preds[j]] + [mask] * (block - 1), [q + i for i in range(block + 1)],
            [q + block] * block, [q + 1 + i for i in range(block + 1)])


@pytest.mark.gpu
@pytest.mark.parametrize("w,block", [(1, 7), (8, 7), (5, 7), (16, 15), (40, 31), (3, 1)])
def test_accept_step_matches_the_reference(env, w, block):
    """Every accepted-prefix length 0 … w − 1 (the first mismatch planted at each row, and
    none), positions near the i32 range's top; outputs poisoned first, rows past B + 1
    untouched."""
    torch, _own_kernels_gpu, k = env
    rng = torch.Generator().manual_seed(w * 100 + block)
    for j in range(w):
        preds = torch.randint(0, 50000, (w,), generator=rng, dtype=torch.int64)
        ids = torch.empty(w, dtype=torch.int64)
        ids[0] = 17
        ids[1:] = preds[:-1]
        if j < w - 1:
            ids[j + 1] = preds[j] + 1                  # the first rejected draft
        p = (2**31 - 128) if j % 2 else 5 * j
        pos = torch.arange(p, p + w, dtype=torch.int64)
        outs = [torch.full((block + 4,), -9, dtype=dt, device="cuda")
                for dt in (torch.int64, torch.int64, torch.int32, torch.int32)]
        k.accept(ids.cuda(), preds.cuda(), pos.cuda(), *outs, block, 123456789012)
        torch.cuda.synchronize()
        want = _accept_reference(ids.tolist(), preds.tolist(), p, block, 123456789012)
        for o, ref in zip(outs, want):
            got = o.cpu().tolist()
            assert got[:len(ref)] == ref and set(got[len(ref):]) == {-9}, (w, block, j)
