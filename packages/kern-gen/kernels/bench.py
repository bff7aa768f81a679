#!/usr/bin/env python3
"""Benchmark kern's own kernels against their torch equivalents on the GPU.

    KERN_KERNELS_CUBINS=DIR python3 packages/kern-gen/kernels/bench.py [--only gemv]

Each measurement replays a CUDA graph of INNER launches (cupy stream capture for kern's
kernels, torch.cuda.graph for torch) and takes the median over REPS replays, timed with CUDA
events: device time, no host launch overhead.  Attention and argmax rotate over several
distinct buffers (> L2) so that every launch reads from HBM.  Prints a short table last.

Attention reads a paged KV pool (ABI.md 3): the single-sequence rows use an identity page
table (key j at slot j: the layout torch's contiguous K/V has too); the ``paged`` rows put
each sequence on pages in a random order of the pool, against consecutive pages, at the
generator's split counts, for one and for many sequences per launch.  The ``1 launch`` /
``2 launches`` rows time the one-launch decode (attn_decode.cu) against the former partial +
reduce pair (attn_decode_split.cu, the generator's default), on the same data, in the same
run.  The ``few splits`` table (also ``--only attn``) times the one-launch decode at fixed
S = 1, 2, 4, 8 against the generator's rule, one row at contexts 128 to 1024.

The GEMV rows (``--only gemv`` runs only them) time the own GEMV on the examples' decode GEMM
shapes at m = 1 and 8 against torch's bf16 ``linear`` (cuBLAS), weights rotated over > 2 x
L2, GB/s = (W + A + C bytes) / time.
"""
from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))

import cupy  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import _own_kernels_gpu  # noqa: E402

INNER = 20
REPS = 30
ROWS = []


def time_cupy(launches) -> float:
    """Median µs per pass over ``launches`` (a list of no-arg callables), graph-replayed."""
    torch.cuda.synchronize()                 # inputs were written on torch's stream
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        for f in launches:
            f()
        s.synchronize()
        try:
            s.begin_capture()
            for _ in range(INNER):
                for f in launches:
                    f()
            graph = s.end_capture()
            run = lambda: graph.launch(s)  # noqa: E731
            per = INNER * len(launches)
        except Exception as exc:  # pragma: no cover - fallback
            print(f"  (cupy graph capture failed: {exc!r}; timing eager launches)")
            run = lambda: [f() for _ in range(INNER) for f in launches]  # noqa: E731
            per = INNER * len(launches)
        run()
        s.synchronize()
        times = []
        for _ in range(REPS):
            e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
            e0.record(s)
            run()
            e1.record(s)
            e1.synchronize()
            times.append(cupy.cuda.get_elapsed_time(e0, e1) * 1e3 / per)
    return statistics.median(times)


def time_torch(launches) -> float:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in launches:
            f()
    torch.cuda.synchronize()
    per = INNER * len(launches)
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(INNER):
                for f in launches:
                    f()
        run = g.replay
    except Exception as exc:  # pragma: no cover - fallback
        print(f"  (torch graph capture failed: {exc!r}; timing eager)")
        run = lambda: [f() for _ in range(INNER) for f in launches]  # noqa: E731
    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPS):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        run()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3 / per)
    return statistics.median(times)


def row(what, ours_us, torch_us, unit, amount):
    """amount: bytes (GB/s) or flops (TFLOP/s) per launch."""
    if unit == "GB/s":
        rate = lambda us: amount / (us * 1e-6) / 1e9  # noqa: E731
    else:
        rate = lambda us: amount / (us * 1e-6) / 1e12  # noqa: E731
    ROWS.append((what, ours_us, rate(ours_us), torch_us, rate(torch_us) if torch_us else None, unit))
    t = f"{torch_us:9.2f} us {rate(torch_us):9.1f}" if torch_us else "        -"
    print(f"{what:56s} kern {ours_us:9.2f} us {rate(ours_us):9.1f} {unit} | torch {t}", flush=True)


def decode_scratch(rows, n_q, n_kv, S, d):
    """part_ml, part_acc and the zeroed arrival counters of the one-launch decode."""
    dev = "cuda"
    return (torch.empty((rows, n_q, S, 2), dtype=torch.float32, device=dev),
            torch.empty((rows, n_q, S, d), dtype=torch.float32, device=dev),
            torch.zeros((rows, n_kv), dtype=torch.int32, device=dev))


def bench_decode(k, n_q, n_kv, d, ctx, splits_list, layers=8):
    """One sequence, one query row at position ctx - 1, identity page table."""
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    caches = [_own_kernels_gpu.make_cache(torch, "token_major", ctx, n_kv, d, ctx, g, dev)
              for _ in range(layers)]
    qkv, q, qs = _own_kernels_gpu.make_q(torch, 1, n_q, n_kv, d, g, dev)
    lens = torch.tensor([ctx], dtype=torch.int32, device=dev)
    table = _own_kernels_gpu.identity_table(torch, 1, ctx, dev)
    out = torch.empty((1, n_q, d), dtype=torch.bfloat16, device=dev)
    scale = 1 / math.sqrt(d)
    nbytes = 2 * ctx * n_kv * d * 2
    best = None
    for entry in splits_list:        # S (that many splits), or (S, s_min): the examples' rule
        S, s_min = entry if isinstance(entry, tuple) else (entry, None)
        pm, pa, cnt = decode_scratch(1, n_q, n_kv, S, d)
        launches = [(lambda c=c: k.attn_decode(q, qs, c[1], c[2], lens, table, pm, pa, cnt,
                                                out, n_q, n_kv, S, scale, 1, s_min=s_min))
                    for c in caches]
        us = time_cupy(launches)
        name = f"S={S}" if s_min is None else f"S={S},min={s_min}"
        print(f"  decode {n_q}q/{n_kv}kv d{d} ctx {ctx} {name}: {us:.2f} us "
              f"{nbytes / us / 1e3:.1f} GB/s", flush=True)
        if best is None or us < best[0]:
            best = (us, name)
    # torch: SDPA on contiguous [1, H, ctx, d] K/V (its preferred layout), GQA
    tus = sdpa_decode_us(n_q, n_kv, d, 1, ctx, layers, "decode")
    row(f"attn decode {n_q}q/{n_kv}kv d{d} ctx{ctx} ({best[1]})", best[0], tus, "GB/s", nbytes)
    del caches
    torch.cuda.empty_cache()


def sdpa_decode_us(n_q, n_kv, d, batch, ctx, layers, what):
    """torch's median µs for one query row per sequence: SDPA (GQA) over contiguous
    [batch, n_kv, ctx, d] K/V, its preferred layout, one cache per layer; None if it fails."""
    dev = "cuda"
    kv = [(torch.randn((batch, n_kv, ctx, d), device=dev, dtype=torch.bfloat16),
           torch.randn((batch, n_kv, ctx, d), device=dev, dtype=torch.bfloat16))
          for _ in range(layers)]
    qt = torch.randn((batch, n_q, 1, d), device=dev, dtype=torch.bfloat16)
    try:
        return time_torch([(lambda a=a: F.scaled_dot_product_attention(qt, a[0], a[1],
                                                                       enable_gqa=True))
                           for a in kv])
    except Exception as exc:
        print(f"  torch SDPA {what} failed: {exc!r}")
        return None


# The generator's decode split counts (kern_gen.llama.own: s_min = decode_splits(kv heads),
# S = 4 s_min), by kv heads.
GEN_SPLITS = {3: (128, 32), 8: (64, 16)}


def paged_layer(n_kv, d, lengths, permuted, gen):
    """A token-major pool holding one sequence per entry of ``lengths`` (random values in
    every slot), its pages in a random order of the pool or consecutive: (k, v, table)."""
    ok = _own_kernels_gpu
    n_pages = sum(ok.pages_for(n) for n in lengths) + 1
    _, kc, vc = ok.make_cache(torch, "token_major", n_pages * ok.PAGE, n_kv, d,
                              n_pages * ok.PAGE, gen, "cuda")
    pages = (ok.random_pages(torch, lengths, n_pages, gen) if permuted
             else ok.contiguous_pages(torch, lengths, "cuda"))
    return kc, vc, ok.table_of(torch, pages, "cuda")


def bench_decode_paged(k, n_q, n_kv, d, batch, ctx, layers):
    """``batch`` sequences of ``ctx`` keys, one query row each, through permuted vs
    consecutive pages; torch: SDPA over a contiguous [batch, n_kv, ctx, d] K/V."""
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(2)
    S, s_min = GEN_SPLITS[n_kv]
    qkv, q, qs = _own_kernels_gpu.make_q(torch, batch, n_q, n_kv, d, g, dev)
    lens = torch.full((batch,), ctx, dtype=torch.int32, device=dev)
    pm, pa, cnt = decode_scratch(batch, n_q, n_kv, S, d)
    out = torch.empty((batch, n_q, d), dtype=torch.bfloat16, device=dev)
    scale = 1 / math.sqrt(d)
    nbytes = 2 * batch * ctx * n_kv * d * 2
    tus = sdpa_decode_us(n_q, n_kv, d, batch, ctx, layers, "batched decode")
    for permuted in (False, True):
        pools = [paged_layer(n_kv, d, [ctx] * batch, permuted, g) for _ in range(layers)]
        us = time_cupy([(lambda c=c: k.attn_decode(q, qs, c[0], c[1], lens, c[2], pm, pa, cnt,
                                                    out, n_q, n_kv, S, scale, batch,
                                                    s_min=s_min))
                        for c in pools])
        order = "permuted" if permuted else "consecutive"
        row(f"attn decode paged {n_q}q/{n_kv}kv d{d} B{batch} ctx{ctx} {order}", us, tus,
            "GB/s", nbytes)
        del pools
    torch.cuda.empty_cache()


LAUNCHES = []   # (what, 1-launch us, 2-launch us, torch us)


def bench_decode_launches(k, n_q, n_kv, d, batch, ctx, layers):
    """``batch`` sequences of ``ctx`` keys (consecutive pages: batch 1 is the identity table),
    the generator's split counts: the one-launch decode vs the former two launches on the
    same data and scratch, and torch SDPA over contiguous K/V."""
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(3)
    S, s_min = GEN_SPLITS[n_kv]
    qkv, q, qs = _own_kernels_gpu.make_q(torch, batch, n_q, n_kv, d, g, dev)
    lens = torch.full((batch,), ctx, dtype=torch.int32, device=dev)
    pm, pa, cnt = decode_scratch(batch, n_q, n_kv, S, d)
    out = torch.empty((batch, n_q, d), dtype=torch.bfloat16, device=dev)
    scale = 1 / math.sqrt(d)
    nbytes = 2 * batch * ctx * n_kv * d * 2
    pools = [paged_layer(n_kv, d, [ctx] * batch, False, g) for _ in range(layers)]
    one = [(lambda c=c: k.attn_decode(q, qs, c[0], c[1], lens, c[2], pm, pa, cnt, out, n_q,
                                       n_kv, S, scale, batch, s_min=s_min)) for c in pools]
    two = [(lambda c=c: k.attn_decode_two_step(q, qs, c[0], c[1], lens, c[2], pm, pa, out, n_q,
                                                n_kv, S, scale, batch, s_min=s_min))
           for c in pools]
    # A B B A: neither order is favoured by clocks warming up; the mean of the two medians
    t1a, t2a, t2b, t1b = (time_cupy(x) for x in (one, two, two, one))
    one, two = (t1a + t1b) / 2, (t2a + t2b) / 2
    del pools
    torch.cuda.empty_cache()
    assert not cnt.any(), "the one-launch decode left its counters non-zero"
    tus = sdpa_decode_us(n_q, n_kv, d, batch, ctx, layers, "decode")
    what = f"attn decode {n_q}q/{n_kv}kv d{d} B{batch} ctx{ctx}"
    row(f"{what} 1 launch", one, tus, "GB/s", nbytes)
    row(f"{what} 2 launches", two, tus, "GB/s", nbytes)
    LAUNCHES.append((what, one, two, tus))


FEW = []   # (what, {splits: 1-launch us}, generator's 1-launch us, 2-launch us, torch us)


def bench_decode_few_splits(k, n_q, n_kv, d, ctx, layers=8):
    """One sequence of ``ctx`` keys: the one-launch decode at a fixed small split count
    (S = s_min = 1, 2, 4, 8; at 1 it writes ``out`` directly, no scratch, no merge) against the
    generator's split rule (one launch, and the default two-launch pair) on the same data.
    The question it answers (issue 16): at short contexts, do fewer, longer splits in one
    launch beat the generator's many short ones in two (SmolLM2 attention: 7.7 us a layer,
    a third of its decode step, session 10's profile)?"""
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(4)
    S, s_min = GEN_SPLITS[n_kv]
    qkv, q, qs = _own_kernels_gpu.make_q(torch, 1, n_q, n_kv, d, g, dev)
    lens = torch.full((1,), ctx, dtype=torch.int32, device=dev)
    out = torch.empty((1, n_q, d), dtype=torch.bfloat16, device=dev)
    scale = 1 / math.sqrt(d)
    pools = [paged_layer(n_kv, d, [ctx], False, g) for _ in range(layers)]

    def one(splits, smin):
        pm, pa, cnt = decode_scratch(1, n_q, n_kv, splits, d)
        us = time_cupy([(lambda c=c: k.attn_decode(q, qs, c[0], c[1], lens, c[2], pm, pa,
                                                    cnt, out, n_q, n_kv, splits, scale, 1,
                                                    s_min=smin)) for c in pools])
        assert not cnt.any(), "the one-launch decode left its counters non-zero"
        return us
    few = {s: one(s, s) for s in (1, 2, 4, 8)}
    gen_one = one(S, s_min)
    pm, pa, _ = decode_scratch(1, n_q, n_kv, S, d)
    two = time_cupy([(lambda c=c: k.attn_decode_two_step(q, qs, c[0], c[1], lens, c[2], pm, pa,
                                                          out, n_q, n_kv, S, scale, 1,
                                                          s_min=s_min)) for c in pools])
    tus = sdpa_decode_us(n_q, n_kv, d, 1, ctx, layers, "decode")
    FEW.append((f"{n_q}q/{n_kv}kv d{d} ctx{ctx}", few, gen_one, two, tus))
    del pools
    torch.cuda.empty_cache()


def bench_prefill(k, n_q, n_kv, d, tokens, permuted=False):
    """One chunk at pos0 = 0: an identity table over a padded slot-major cache, or permuted
    pages of a token-major pool."""
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(1)
    if permuted:
        kc, vc, table = paged_layer(n_kv, d, [tokens], True, g)
    else:
        _, kc, vc = _own_kernels_gpu.make_cache(torch, "slot_major_padded", tokens, n_kv, d,
                                                tokens, g, dev)
        table = _own_kernels_gpu.identity_table(torch, 1, tokens, dev)
    qkv, q, qs = _own_kernels_gpu.make_q(torch, tokens, n_q, n_kv, d, g, dev)
    pos = torch.zeros((1,), dtype=torch.int32, device=dev)
    out = torch.empty((tokens, n_q, d), dtype=torch.bfloat16, device=dev)
    scale = 1 / math.sqrt(d)
    flops = 4 * n_q * d * tokens * (tokens + 1) / 2
    us = time_cupy([lambda: k.attn_prefill(q, qs, kc, vc, pos, table, out, n_q, n_kv, tokens,
                                           scale)])
    qt = torch.randn((1, n_q, tokens, d), device=dev, dtype=torch.bfloat16)
    kt = torch.randn((1, n_kv, tokens, d), device=dev, dtype=torch.bfloat16)
    vt = torch.randn((1, n_kv, tokens, d), device=dev, dtype=torch.bfloat16)
    try:
        tus = time_torch([lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True,
                                                                 enable_gqa=True)])
    except Exception as exc:
        print(f"  torch SDPA prefill failed: {exc!r}")
        tus = None
    paged = " paged permuted" if permuted else ""
    row(f"attn prefill {n_q}q/{n_kv}kv d{d} T{tokens} causal{paged}", us, tus, "TFLOP/s", flops)


def bench_argmax(k, vocab=151936, copies=192):   # 58 MB > L2
    dev = "cuda"
    logits = [torch.randn((1, vocab), device=dev).to(torch.bfloat16) for _ in range(copies)]
    pv = torch.empty((1, 64), dtype=torch.float32, device=dev)
    pi = torch.empty((1, 64), dtype=torch.int32, device=dev)
    out = torch.empty((1,), dtype=torch.int64, device=dev)
    us = time_cupy([(lambda x=x: k.argmax(x, pv, pi, out, 64)) for x in logits])
    tus = time_torch([(lambda x=x: torch.argmax(x, dim=-1)) for x in logits])
    row(f"argmax 1x{vocab} (2 kernels, P=64)", us, tus, "GB/s", vocab * 2)


def bench_embedding(k, tokens, vocab=151936, hidden=2560):
    dev = "cuda"
    table = torch.randn((vocab, hidden), device=dev).to(torch.bfloat16)
    ids = torch.randint(0, vocab, (tokens,), device=dev)
    out = torch.empty((tokens, hidden), dtype=torch.bfloat16, device=dev)
    us = time_cupy([lambda: k.embedding(ids, table, out)])
    tus = time_torch([lambda: F.embedding(ids, table)])
    row(f"embedding T{tokens} hidden{hidden}", us, tus, "GB/s", 2 * tokens * hidden * 2)


# The own GEMV (ABI.md 4) on the examples' decode GEMMs: (name, n, k).
GEMV_SHAPES = [
    ("qwen3-4b qkv", 6144, 2560), ("qwen3-4b o", 2560, 4096), ("qwen3-4b gate_up", 19456, 2560),
    ("qwen3-4b down", 2560, 9728), ("qwen3-4b lm_head", 151936, 2560),
    ("smollm2 qkv", 960, 576), ("smollm2 o", 576, 576), ("smollm2 gate_up", 3072, 576),
    ("smollm2 down", 576, 1536), ("smollm2 lm_head", 49152, 576),
]
ROTATE_BYTES = 128 << 20     # weight copies per shape: > 2 x the H200's 50 MB L2


def bench_gemv(k, name, n, kk, m):
    """Ours at every block size (1 .. 16 warps; the row: the generator's) vs torch's bf16
    ``linear`` (cuBLAS), both over enough copies of W that every launch reads it from HBM.
    Launched without PDL (cupy and torch graphs): kernel time only, no overlap with a
    previous kernel."""
    dev = "cuda"
    copies = max(1, min(256, -(-ROTATE_BYTES // (2 * n * kk))))
    ws = [(torch.randn((n, kk), device=dev) * 0.05).to(torch.bfloat16) for _ in range(copies)]
    a = torch.randn((m, kk), device=dev).to(torch.bfloat16)
    c = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
    nbytes = 2 * (n * kk + m * kk + m * n)
    gen = _own_kernels_gpu.gemv_warps(n, kk)
    us = {}
    for nw in (1, 2, 4, 8, 16):
        if nw == 1 or nw <= -(-kk // 32):
            us[nw] = time_cupy([(lambda w=w, nw=nw: k.gemv(a, w, c, warps=nw)) for w in ws])
    best = min(us, key=us.get)
    print("  gemv " + name + f" m{m}: " + ", ".join(f"NW={nw} {t:.2f} us" for nw, t in us.items()),
          flush=True)
    tus = time_torch([(lambda w=w: F.linear(a, w)) for w in ws])
    row(f"gemv {name} {n}x{kk} m{m} NW={gen} (best {best}: {us[best]:.2f})", us[gen], tus,
        "GB/s", nbytes)
    del ws
    torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["all", "gemv", "attn"], default="all",
                    help="gemv: only the GEMV rows; attn: only the one-vs-two-launch decode rows "
                         "(default: every benchmark, GEMV last)")
    args = ap.parse_args(argv)
    t0 = time.time()
    k = _own_kernels_gpu.Kernels(_own_kernels_gpu.cubin_dir())
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  cupy {cupy.__version__}")
    if args.only in ("all", "attn"):
        # one launch vs the former two (issue 16), the generator's split counts
        for n_q, n_kv, d in ((32, 8, 128), (9, 3, 64)):
            for ctx in (128, 512, 1024, 4096, 32768):
                bench_decode_launches(k, n_q, n_kv, d, 1, ctx, layers=4 if ctx > 4096 else 8)
            for batch in (8, 32, 64):
                bench_decode_launches(k, n_q, n_kv, d, batch, 1024, layers=2)
            for ctx in (128, 256, 512, 1024):
                bench_decode_few_splits(k, n_q, n_kv, d, ctx)
    if args.only == "all":
        others(k)
    if args.only in ("all", "gemv"):
        for m in (1, 8):
            for name, n, kk in GEMV_SHAPES:
                bench_gemv(k, name, n, kk, m)
    print(f"\n== summary (median device time per launch; rate) [{time.time() - t0:.0f} s] ==")
    print(f"{'what':56s} {'kern us':>9s} {'rate':>9s} | {'torch us':>9s} {'rate':>9s}  unit")
    for what, us, r, tus, tr, unit in ROWS:
        ts = f"{tus:9.2f} {tr:9.1f}" if tus else f"{'-':>9s} {'-':>9s}"
        print(f"{what:56s} {us:9.2f} {r:9.1f} | {ts}  {unit}")
    if LAUNCHES:
        print("\n== decode: one launch vs two (median us per layer; saved = two - one) ==")
        print(f"{'what':44s} {'1 launch':>9s} {'2 launch':>9s} {'saved':>7s} {'torch':>9s}")
        for what, one, two, tus in LAUNCHES:
            ts = f"{tus:9.2f}" if tus else f"{'-':>9s}"
            print(f"{what:44s} {one:9.2f} {two:9.2f} {two - one:7.2f} {ts}")
    if FEW:
        print("\n== decode, one row: one launch at S = 1/2/4/8 vs the generator's rule (us) ==")
        print(f"{'what':28s} {'S=1':>7s} {'S=2':>7s} {'S=4':>7s} {'S=8':>7s} "
              f"{'gen 1L':>7s} {'gen 2L':>7s} {'torch':>7s}")
        for what, few, one, two, tus in FEW:
            print(f"{what:28s} " + " ".join(f"{few[s]:7.2f}" for s in (1, 2, 4, 8))
                  + f" {one:7.2f} {two:7.2f} " + (f"{tus:7.2f}" if tus else f"{'-':>7s}"))
    return 0


def others(k) -> None:
    """Every benchmark but the GEMV's and the one-vs-two-launch decode rows."""
    for ctx in (128, 512, 1024, 4096):
        bench_decode(k, 32, 8, 128, ctx, (4, 8, 16, 32, 48))
    for ctx in (128, 512, 1024, 4096):
        bench_decode(k, 9, 3, 64, ctx, (8, 16, 32, 64, 128))
    # long contexts (issue 13): fixed split counts and the examples' context-following rule
    for ctx in (8192, 32768):
        bench_decode(k, 32, 8, 128, ctx, (16, 32, 64, 128, (64, 16)), layers=4)
        bench_decode(k, 9, 3, 64, ctx, (32, 64, 128, 256, (128, 32)), layers=4)
    # paged pool (issue 20): page order at batch 1, then many sequences per launch
    for n_q, n_kv, d in ((32, 8, 128), (9, 3, 64)):
        bench_decode_paged(k, n_q, n_kv, d, 1, 4096, layers=8)
        bench_decode_paged(k, n_q, n_kv, d, 1, 32768, layers=4)
        bench_decode_paged(k, n_q, n_kv, d, 64, 1024, layers=2)
        bench_decode_paged(k, n_q, n_kv, d, 256, 512, layers=2)
    for tokens in (512, 2048):
        bench_prefill(k, 32, 8, 128, tokens)
    for tokens in (512, 2048):
        bench_prefill(k, 9, 3, 64, tokens)
    bench_prefill(k, 32, 8, 128, 2048, permuted=True)
    bench_prefill(k, 9, 3, 64, 2048, permuted=True)
    bench_argmax(k)
    for tokens in (1, 2048):
        bench_embedding(k, tokens)


if __name__ == "__main__":
    sys.exit(main())
