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
PAGE = 16          # slots per page of the paged KV pool (kPageTokens, contract PAGE_TOKENS)


GEMV_COLS, GEMV_ROWS = 16, 8   # output columns / rows of A per GEMV block (ABI.md 4)


def gemv_warps(n: int, k: int) -> int:
    """kern-gen's warps per GEMV block (``kern_gen.llama.gemm.gemv_warps``; a CPU test checks
    that the two agree): the largest power of two <= min(16, ceil(k/32), the grid cap: 16 up
    to 256 blocks of 16 columns, 8 up to 2048, else 4)."""
    blocks = -(-n // GEMV_COLS)
    cap = min(16, -(-k // 32), 16 if blocks <= 256 else 8 if blocks <= 2048 else 4)
    nw = 1
    while nw * 2 <= cap:
        nw *= 2
    return nw


def _build_module():
    spec = importlib.util.spec_from_file_location("kern_gen_kernels_build", KERNELS / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cubin_bytes(source: str, defines: tuple[str, ...] = ()) -> bytes:
    """The cubin of ``kernels/<source>`` built now with ``defines`` (``NAME=VALUE``), for the
    CPU tests that read machine code; the calling test is skipped without nvcc."""
    import pytest
    b = _build_module()
    nvcc = b.find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    with tempfile.TemporaryDirectory() as tmp:
        return b.build_one(nvcc, KERNELS / source, Path(tmp), defines=defines).read_bytes()


def cubin_dir() -> Path:
    """``$KERN_KERNELS_CUBINS`` if set (device_check.sh builds there), else a fresh build."""
    env = os.environ.get("KERN_KERNELS_CUBINS")
    if env:
        return Path(env)
    out = Path(tempfile.mkdtemp(prefix="kern-cubins-"))
    _build_module().build(out)
    return out


_PDL_ATTR = 6        # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


def pdl_launcher():
    """``launch(fn, grid, block, smem, stream, args)``: the cupy kernel ``fn`` through
    ``cuLaunchKernelEx`` with programmatic stream serialization on ``stream`` (a CUDA stream
    handle), ``args`` as numpy scalars (``ptr`` for pointers, np.int32, np.float32); None where
    libcuda has no ``cuLaunchKernelEx``."""
    import ctypes as C
    try:
        launch_ex = C.CDLL("libcuda.so.1").cuLaunchKernelEx
    except (OSError, AttributeError):
        return None

    class Value(C.Union):
        _fields_ = [("pad", C.c_char * 64), ("i", C.c_int)]

    class Attr(C.Structure):
        _fields_ = [("id", C.c_int), ("pad", C.c_char * 4), ("value", Value)]

    class Config(C.Structure):
        _fields_ = [("grid", C.c_uint * 3), ("block", C.c_uint * 3), ("smem", C.c_uint),
                    ("stream", C.c_void_p), ("attrs", C.POINTER(Attr)), ("n_attrs", C.c_uint)]

    ctype = {np.uint64: C.c_uint64, np.int64: C.c_int64, np.int32: C.c_int32,
             np.float32: C.c_float}

    def launch(fn, grid, block, smem, stream, args):
        # cupy's get_function gives a RawKernel (CUfunction at .kernel.ptr) or a Function (.ptr)
        handle = getattr(fn, "ptr", None) or fn.kernel.ptr
        attr = Attr(id=_PDL_ATTR)
        attr.value.i = 1
        cfg = Config((C.c_uint * 3)(*grid), (C.c_uint * 3)(*block), smem, C.c_void_p(stream),
                     C.pointer(attr), 1)
        vals = [ctype[type(v)](v) for v in args]
        params = (C.c_void_p * len(vals))(*[C.cast(C.pointer(v), C.c_void_p) for v in vals])
        rc = launch_ex(C.byref(cfg), C.c_void_p(handle), params, None)
        assert rc == 0, f"cuLaunchKernelEx: CUresult {rc}"

    return launch


ATOL = 2e-2
RTOL = 2e-2


def report(line: str) -> None:
    """Print a per-case line and append it to ``$KERN_KERNELS_REPORT`` when that is set
    (device_check.sh shows the file)."""
    path = os.environ.get("KERN_KERNELS_REPORT")
    if path:
        with open(path, "a") as fh:
            fh.write(line + "\n")
    print(line)


def compare(torch, name, got, ref):
    """``got`` against the float32 reference ``ref``: no NaN, within ATOL + RTOL·|ref|."""
    got = got.float()
    assert not torch.isnan(got).any(), f"{name}: NaN in output"
    err = (got - ref).abs()
    max_abs = err.max().item()
    max_rel = (err / ref.abs().clamp_min(1e-3)).max().item()
    scale = ref.abs().max().item()
    report(f"{name}: max_abs={max_abs:.3e} max_rel(|ref|>=1e-3)={max_rel:.3e} "
            f"max|ref|={scale:.3f}")
    bad = err > ATOL + RTOL * ref.abs()
    assert not bad.any(), f"{name}: {int(bad.sum())} elements off, max_abs={max_abs}"


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

    def markov(self, prev, w1, w2, logits, part_val, part_idx, out, parts):
        """DSpark's Markov step (ABI.md 2a): ``out[0] = argmax(bf16(logits + w2 · w1[prev]))``
        over one row, ``parts`` partial blocks."""
        vocab, rank = w2.shape
        f1 = self.fn("argmax.cubin", "kern_argmax_markov_bf16_partial")
        f2 = self.fn("argmax.cubin", "kern_argmax_bf16_reduce")
        f1((1, parts, 1), (256, 1, 1), (ptr(prev), ptr(w1), ptr(w2), ptr(logits), ptr(part_val),
                                        ptr(part_idx), np.int32(vocab), np.int32(rank)))
        f2((1, 1, 1), (32, 1, 1), (ptr(part_val), ptr(part_idx), ptr(out), np.int32(parts)))

    def accept(self, ids, preds, positions, next_ids, next_pos, draft_lens, verify_lens, block,
               mask):
        """DSpark's acceptance step (ABI.md 6) over ``w = len(ids)`` verify rows."""
        f = self.fn("accept.cubin", "kern_spec_accept")
        f((1, 1, 1), (32, 1, 1), (ptr(ids), ptr(preds), ptr(positions), ptr(next_ids),
                                  ptr(next_pos), ptr(draft_lens), ptr(verify_lens),
                                  np.int32(ids.numel()), np.int32(block), np.int64(mask)))

    def gemv(self, a, w, c, m=None, warps=None, symbol="kern_gemv_bf16"):
        """c[m, n] = a[m, k] @ w[n, k]^T (bf16, contiguous); ``warps`` per block (default:
        the generator's rule); ``symbol`` kern_gemv_bf16 or kern_gemv_et_bf16 (same
        contract)."""
        m = a.shape[0] if m is None else m
        n, k = w.shape
        warps = gemv_warps(n, k) if warps is None else warps
        f = self.fn("gemv.cubin", symbol)
        f((-(-n // GEMV_COLS), -(-m // GEMV_ROWS), 1), (32 * warps, 1, 1),
          (ptr(a), ptr(w), ptr(c), np.int32(m), np.int32(n), np.int32(k)))

    def gemv_acc(self, a, w, c, warps=None):
        """c[m, n] += a[m, k] @ w[n, k]^T in place (ABI.md 4c)."""
        m, (n, k) = a.shape[0], w.shape
        warps = gemv_warps(n, k) if warps is None else warps
        f = self.fn("gemv.cubin", "kern_gemv_acc_bf16")
        f((-(-n // GEMV_COLS), -(-m // GEMV_ROWS), 1), (32 * warps, 1, 1),
          (ptr(a), ptr(w), ptr(c), np.int32(m), np.int32(n), np.int32(k)))

    def gemv_silu(self, a, w, c, warps):
        """c[m, n] = silu(a @ w[:n]^T) * (a @ w[n:]^T), w [2n, k] (ABI.md 4a)."""
        m, (n2, k) = a.shape[0], w.shape
        f = self.fn("gemv.cubin", "kern_gemv_silu_bf16")
        f((-(-(n2 // 2) // GEMV_COLS), -(-m // GEMV_ROWS), 1), (32 * warps, 1, 1),
          (ptr(a), ptr(w), ptr(c), np.int32(m), np.int32(n2 // 2), np.int32(k)))

    def gemv_splitk(self, a, w, c, splits, warps=None, silu=False):
        """gemv / gemv_silu with k cut over a cluster of ``splits`` blocks (ABI.md 4f):
        ``kern_gemv[_silu]_sk{splits}_bf16``, grid ``[ceil(n / 16), ceil(m / 8), splits]``."""
        m, (rows_w, k) = a.shape[0], w.shape
        n = rows_w // 2 if silu else rows_w
        warps = gemv_warps(rows_w, k) if warps is None else warps
        f = self.fn("gemv_splitk.cubin",
                    f"kern_gemv_{'silu_' if silu else ''}sk{splits}_bf16")
        f((-(-n // GEMV_COLS), -(-m // GEMV_ROWS), splits), (32 * warps, 1, 1),
          (ptr(a), ptr(w), ptr(c), np.int32(m), np.int32(n), np.int32(k)))

    def gemv_norm(self, x, g, xo, w, c, eps):
        """Norm 0 + GEMV (ABI.md 4e): c = gemv(rmsnorm(x) * g), xo = f32(x)."""
        m, (n, k) = x.shape[0], w.shape
        f = self.fn("gemv_norm.cubin", "kern_gemv_norm_bf16")
        f((-(-n // GEMV_COLS), -(-m // GEMV_ROWS), 1), (32 * gemv_warps(n, k), 1, 1),
          (ptr(x), ptr(g), ptr(xo), ptr(w), ptr(c), np.int32(m), np.int32(n), np.int32(k),
           np.float32(eps)))

    def gemv_rnorm(self, r, parts, g, w, c, eps, silu=False, early=False):
        """c = gemv(rmsnorm(r) * g) with the sum of squares from ``parts`` [m, p] (ABI.md
        4e); ``silu``: w [2n, k] and the SiLU·mul epilogue; ``early``: the early-trigger
        twin ``kern_gemv_rnorm_et_bf16`` (not with ``silu``)."""
        m, (rows_w, k), p = r.shape[0], w.shape, parts.shape[1]
        n = rows_w // 2 if silu else rows_w
        f = self.fn("gemv_norm.cubin", "kern_gemv_rnorm_silu_bf16" if silu else
                    "kern_gemv_rnorm_et_bf16" if early else "kern_gemv_rnorm_bf16")
        f((-(-n // GEMV_COLS), -(-m // GEMV_ROWS), 1), (32 * gemv_warps(rows_w, k), 1, 1),
          (ptr(r), ptr(parts), ptr(g), ptr(w), ptr(c), np.int32(m), np.int32(n), np.int32(k),
           np.int32(p), np.float32(eps)))

    def gemv_res(self, a, w, r, parts):
        """r += f32(bf16(a @ w^T)) in place, parts[m, ceil(n / 16)] its 16-column sums of
        squares (ABI.md 4e)."""
        m, (n, k) = a.shape[0], w.shape
        f = self.fn("gemv_norm.cubin", "kern_gemv_res_bf16")
        f((-(-n // GEMV_COLS), -(-m // GEMV_ROWS), 1), (32 * gemv_warps(n, k), 1, 1),
          (ptr(a), ptr(w), ptr(r), ptr(parts), np.int32(m), np.int32(n), np.int32(k)))

    def rmsnorm(self, first, src, r, g, out, eps):
        """An own norm launch (ABI.md 4g): ``first``: r = f32(src) (the bf16 row), else
        r += f32(src) (the GEMM output d) in place; out = bf16(g * (r * rstd))."""
        m, k = src.shape
        sym = "kern_rmsnorm_first_bf16" if first else "kern_rmsnorm_add_bf16"
        ptrs = (ptr(src), ptr(g), ptr(r)) if first else (ptr(src), ptr(r), ptr(g))
        self.fn("rmsnorm.cubin", sym)((m, 1, 1), (32 * -(-k // 256), 1, 1),
                                      (*ptrs, ptr(out), np.int32(k), np.float32(eps)))

    def gemv_split3(self, a, w, outs, widths, warps):
        """outs[i][m, widths[i]] = a @ (rows of part i of w)^T (ABI.md 4b)."""
        m, (n, k) = a.shape[0], w.shape
        f = self.fn("gemv.cubin", "kern_gemv_split3_bf16")
        f((-(-n // GEMV_COLS), -(-m // GEMV_ROWS), 1), (32 * warps, 1, 1),
          (ptr(a), ptr(w), *(ptr(o) for o in outs), np.int32(m),
           *(np.int32(x) for x in widths), np.int32(k)))

    def rope_kv(self, qkv, angles, slots, q_out, kc, vc, heads, kv_heads, head_dim,
                cache_len):
        f = self.fn("rope_kv.cubin", "kern_rope_kv_bf16")
        tokens = qkv.shape[0]
        f((tokens, 1, 1), (256, 1, 1),
          (ptr(qkv), ptr(angles), ptr(slots), ptr(q_out), ptr(kc), ptr(vc), np.int32(tokens),
           np.int32(heads), np.int32(kv_heads), np.int32(head_dim), np.int64(cache_len)))

    def rope_kv_norm(self, qkv, q_w, k_w, angles, slots, q_out, kc, vc, heads, kv_heads,
                     head_dim, cache_len, eps):
        f = self.fn("rope_kv_norm.cubin", "kern_rope_kv_norm_bf16")
        tokens = qkv.shape[0]
        f((tokens, -(-(heads + 2 * kv_heads) // 8), 1), (256, 1, 1),
          (ptr(qkv), ptr(q_w), ptr(k_w), ptr(angles), ptr(slots), ptr(q_out), ptr(kc), ptr(vc),
           np.int32(tokens), np.int32(heads), np.int32(kv_heads), np.int32(head_dim),
           np.int64(cache_len), np.float32(eps)))

    def rope_kv3_norm(self, q, k, v, q_w, k_w, angles, slots, q_out, kc, vc, heads, kv_heads,
                      head_dim, cache_len, eps):
        f = self.fn("rope_kv_norm.cubin", "kern_rope_kv3_norm_bf16")
        tokens = q.shape[0]
        f((tokens, -(-(heads + 2 * kv_heads) // 8), 1), (256, 1, 1),
          (ptr(q), ptr(k), ptr(v), ptr(q_w), ptr(k_w), ptr(angles), ptr(slots), ptr(q_out),
           ptr(kc), ptr(vc), np.int32(tokens), np.int32(heads), np.int32(kv_heads),
           np.int32(head_dim), np.int64(cache_len), np.float32(eps)))

    def rope_kv3(self, q, k, v, angles, slots, q_out, kc, vc, heads, kv_heads, head_dim,
                 cache_len):
        f = self.fn("rope_kv.cubin", "kern_rope_kv3_bf16")
        tokens = q.shape[0]
        f((tokens, 1, 1), (256, 1, 1),
          (ptr(q), ptr(k), ptr(v), ptr(angles), ptr(slots), ptr(q_out), ptr(kc), ptr(vc),
           np.int32(tokens), np.int32(heads), np.int32(kv_heads), np.int32(head_dim),
           np.int64(cache_len)))

    def attn_decode(self, q, q_row_stride, k, v, kv_lens, table, part_ml, part_acc, counters,
                    out, n_q, n_kv, splits, scale, tokens, s_min=None):
        """The one-launch split-KV decode (ABI.md 3a).  k, v: views [slots, n_kv, D] with unit
        last stride (any other strides); kv_lens i32 [tokens]; table i32 [tokens, P] with unit
        last stride (row stride: table.stride(0)); part_ml f32 [tokens, n_q, S, 2], part_acc
        f32 [tokens, n_q, S, D], counters 4-byte [tokens, n_kv] (zero before the launch, zero
        after it); ``splits``: the grid's (most) splits S, ``s_min``: the fewest a row uses
        (default: ``splits``, a fixed split count at every context)."""
        s_min = splits if s_min is None else s_min
        d = k.shape[-1]
        assert table.dtype == kv_lens.dtype and table.stride(-1) == 1
        assert counters.element_size() == 4 and counters.numel() >= tokens * n_kv
        f = self.fn("attn_decode.cubin", f"kern_attn_decode_bf16_d{d}")
        f((n_kv, splits, tokens), (128, 1, 1),
          (ptr(q), ptr(k), ptr(v), ptr(kv_lens), ptr(table), ptr(out), ptr(part_ml),
           ptr(part_acc), ptr(counters), np.int32(q_row_stride), np.int64(k.stride(0)),
           np.int64(k.stride(1)), np.int64(v.stride(0)), np.int64(v.stride(1)), np.int32(n_q),
           np.int32(n_kv), np.float32(scale), np.int32(s_min), np.int32(table.stride(0))))

    def attn_decode_two_step(self, q, q_row_stride, k, v, kv_lens, table, part_ml, part_acc,
                             out, n_q, n_kv, splits, scale, tokens, s_min=None):
        """The two launches (partial + reduce) of ``attn_decode_split.cu`` (ABI.md 3a, the
        generator's default decode attention)."""
        s_min = splits if s_min is None else s_min
        d = k.shape[-1]
        assert table.dtype == kv_lens.dtype and table.stride(-1) == 1
        cubin = "attn_decode_split.cubin"
        f1 = self.fn(cubin, f"kern_attn_decode_partial_bf16_d{d}")
        f2 = self.fn(cubin, f"kern_attn_decode_reduce_bf16_d{d}")
        f1((n_kv, splits, tokens), (128, 1, 1),
           (ptr(q), ptr(k), ptr(v), ptr(kv_lens), ptr(table), ptr(part_ml), ptr(part_acc),
            np.int32(q_row_stride), np.int64(k.stride(0)), np.int64(k.stride(1)),
            np.int64(v.stride(0)), np.int64(v.stride(1)), np.int32(n_q), np.int32(n_kv),
            np.float32(scale), np.int32(s_min), np.int32(table.stride(0))))
        f2((n_q, tokens, 1), (d, 1, 1),
           (ptr(part_ml), ptr(part_acc), ptr(kv_lens), ptr(out), np.int32(n_q),
            np.int32(splits), np.int32(s_min)))

    def attn_decode_cluster(self, q, q_row_stride, k, v, kv_lens, table, out, n_q, n_kv, scale,
                            tokens):
        """The cluster-merged decode (ABI.md 3a″): grid (n_kv, 8, tokens), block 256, no
        scratch; arguments as :meth:`attn_decode`'s."""
        d = k.shape[-1]
        assert table.dtype == kv_lens.dtype and table.stride(-1) == 1
        f = self.fn("attn_decode_cluster.cubin", f"kern_attn_decode_cluster_bf16_d{d}")
        f((n_kv, 8, tokens), (256, 1, 1),
          (ptr(q), ptr(k), ptr(v), ptr(kv_lens), ptr(table), ptr(out), np.int32(q_row_stride),
           np.int64(k.stride(0)), np.int64(k.stride(1)), np.int64(v.stride(0)),
           np.int64(v.stride(1)), np.int32(n_q), np.int32(n_kv), np.float32(scale),
           np.int32(table.stride(0))))

    def attn_decode_cluster_rope(self, qkv, angles, slots, k, v, kv_lens, table, out, n_q,
                                 n_kv, scale, cache_len, q_w=None, k_w=None, eps=0.0):
        """The cluster decode with the layer's rope and K/V writes folded in (ABI.md 3a‴):
        ``kern_attn_decode_cluster_rope_bf16`` or, with ``q_w`` / ``k_w``, its ``_norm``
        twin; qkv bf16 [tokens, (n_q + 2 n_kv) D], angles f32 [D/2, tokens], slots i64
        [tokens]; the rest as :meth:`attn_decode_cluster`'s."""
        d, tokens = k.shape[-1], qkv.shape[0]
        norm = q_w is not None
        f = self.fn("attn_decode_cluster.cubin",
                    f"kern_attn_decode_cluster_rope{'_norm' if norm else ''}_bf16_d{d}")
        f((n_kv, 8, tokens), (256, 1, 1),
          (ptr(qkv), *((ptr(q_w), ptr(k_w)) if norm else ()), ptr(angles), ptr(slots), ptr(k),
           ptr(v), ptr(kv_lens), ptr(table), ptr(out), np.int32(tokens), np.int64(k.stride(0)),
           np.int64(k.stride(1)), np.int64(v.stride(0)), np.int64(v.stride(1)), np.int32(n_q),
           np.int32(n_kv), np.float32(scale), np.int32(table.stride(0)), np.int64(cache_len),
           *((np.float32(eps),) if norm else ())))

    def attn_rows_two_step(self, q, q_row_stride, k, v, kv_lens, table, part_ml, part_acc,
                           out, n_q, n_kv, splits, scale, tokens, s_min):
        """The tensor-core rows partial of ``attn_prefill.cu`` (ABI.md 3b′: one sequence's
        ``tokens`` rows, grid (n_kv, S, 1)) and ``attn_decode_split.cu``'s reduce."""
        d = k.shape[-1]
        assert table.dtype == kv_lens.dtype and table.stride(-1) == 1
        f1 = self.fn("attn_prefill.cubin", f"kern_attn_rows_partial_bf16_d{d}")
        f2 = self.fn("attn_decode_split.cubin", f"kern_attn_decode_reduce_bf16_d{d}")
        smem = PREFILL_SMEM[d]
        if ("rows", d) not in self._smem_set:
            f1.max_dynamic_shared_size_bytes = smem
            self._smem_set.add(("rows", d))
        f1((n_kv, splits, 1), (128, 1, 1),
           (ptr(q), ptr(k), ptr(v), ptr(kv_lens), ptr(table), ptr(part_ml), ptr(part_acc),
            np.int32(q_row_stride), np.int64(k.stride(0)), np.int64(k.stride(1)),
            np.int64(v.stride(0)), np.int64(v.stride(1)), np.int32(n_q), np.int32(n_kv),
            np.float32(scale), np.int32(s_min), np.int32(table.stride(0)), np.int32(tokens)),
           shared_mem=smem)
        f2((n_q, tokens, 1), (d, 1, 1),
           (ptr(part_ml), ptr(part_acc), ptr(kv_lens), ptr(out), np.int32(n_q),
            np.int32(splits), np.int32(s_min)))

    def attn_prefill(self, q, q_row_stride, k, v, pos0, table, out, n_q, n_kv, tokens, scale):
        """One sequence: its pages are row 0 of ``table`` (i32, unit last stride)."""
        d = k.shape[-1]
        assert table.stride(-1) == 1
        f = self.fn("attn_prefill.cubin", f"kern_attn_prefill_bf16_d{d}")
        smem = PREFILL_SMEM[d]
        if (d, smem) not in self._smem_set:      # opt in above 48 KB (as kern-runtime does)
            f.max_dynamic_shared_size_bytes = smem
            self._smem_set.add((d, smem))
        f((math.ceil(tokens / 64), n_q, 1), (128, 1, 1),
          (ptr(q), ptr(k), ptr(v), ptr(pos0), ptr(table), ptr(out), np.int32(q_row_stride),
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


# ----------------------------------------------------------------------------- paged KV

def pages_for(n_keys: int) -> int:
    return -(-n_keys // PAGE)


def identity_table(torch, rows: int, n_keys: int, dev):
    """i32 [rows, ceil(n_keys / PAGE)], every row 0, 1, 2, ...: key j at slot j (batch 1)."""
    width = max(1, pages_for(n_keys))
    return torch.arange(width, dtype=torch.int32, device=dev).repeat(rows, 1).contiguous()


def causal_kv_lens(torch, pos0: int, tokens: int, dev):
    """i32 [tokens]: row t of a chunk at position pos0 + t sees pos0 + t + 1 keys."""
    return torch.arange(pos0 + 1, pos0 + tokens + 1, dtype=torch.int32, device=dev)


def poison_page0(torch, k, v) -> None:
    """Page 0 of a pool, never referenced by a random table: huge K (a score that would
    dominate its row) and NaN V in one half, the other way round in the other half."""
    big = torch.tensor(3e38, dtype=torch.bfloat16, device=k.device)
    k[:PAGE // 2] = big
    v[:PAGE // 2] = float("nan")
    k[PAGE // 2:PAGE] = float("nan")
    v[PAGE // 2:PAGE] = -big


def random_pages(torch, lengths: list[int], n_pages: int, gen) -> list:
    """Per sequence, ceil(L / PAGE) distinct pages drawn without replacement from pages
    1 .. n_pages - 1 of one pool (i32 tensors; page 0 is never drawn)."""
    counts = [pages_for(n) for n in lengths]
    assert sum(counts) <= n_pages - 1, "pool too small"
    perm = torch.randperm(n_pages - 1, generator=gen, device=gen.device).to(torch.int32) + 1
    return list(torch.split(perm[:sum(counts)], counts))


def contiguous_pages(torch, lengths: list[int], dev) -> list:
    """Per sequence, consecutive pages from page 0 on (sequence 0 at slots 0 .. L0 - 1)."""
    out, start = [], 0
    for n in lengths:
        out.append(torch.arange(start, start + pages_for(n), dtype=torch.int32, device=dev))
        start += pages_for(n)
    return out


def table_of(torch, rows_pages: list, dev, width: int | None = None):
    """i32 [rows, width]: row r holds rows_pages[r], then 0 (the poisoned page) up to width."""
    width = width or max(1, max(len(p) for p in rows_pages))
    table = torch.zeros((len(rows_pages), width), dtype=torch.int32, device=dev)
    for r, p in enumerate(rows_pages):
        table[r, :len(p)] = p
    return table


def key_slots(torch, pages, n_keys: int):
    """i64 [n_keys]: the pool slot of key j through a page list (the ABI's mapping)."""
    j = torch.arange(n_keys, device=pages.device)
    return pages.long()[j // PAGE] * PAGE + j % PAGE


def random_kv(torch, n_keys: int, n_kv: int, d: int, gen, dev):
    """The logical K and V of one sequence, bf16 [n_keys, n_kv, d]."""
    k = torch.randn((n_keys, n_kv, d), generator=gen, device=dev).to(torch.bfloat16)
    v = torch.randn((n_keys, n_kv, d), generator=gen, device=dev).to(torch.bfloat16)
    return k, v


def paged_pool(torch, layout: str, n_pages: int, n_kv: int, d: int, gen, dev):
    """An all-NaN pool of n_pages pages in ``layout`` (see make_cache): (pool, k, v)."""
    return make_cache(torch, layout, n_pages * PAGE, n_kv, d, 0, gen, dev)


def write_sequence(torch, k, v, pages, lk, lv) -> None:
    """Store one sequence's logical K/V [L, n_kv, d] at the slots of its pages."""
    slots = key_slots(torch, pages, lk.shape[0])
    k[slots] = lk
    v[slots] = lv


def rope64(torch, x, ang):
    """x [T, heads, D] (bf16), ang [D/2, T] (f32) -> float64 rotate-half rope."""
    x = x.double()
    a = torch.cat([ang.double().T, ang.double().T], -1)[:, None, :]     # [T, 1, D]
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * torch.cos(a) + rot * torch.sin(a)


def check_rope(torch, label: str, got, ref) -> None:
    """A rope kernel's bf16 output against its float64 reference: no NaN, within one bf16
    ulp everywhere, equal to the rounded reference in more than 99 % of the elements."""
    err = (got.double() - ref).abs()
    ulp = torch.ldexp(torch.ones_like(ref), torch.frexp(ref)[1] - 8)   # bf16 ulp at |ref|
    same = (got == ref.to(torch.bfloat16)).double().mean().item()
    report(f"{label}: max err {(err / ulp).max().item():.3f} ulp, equal to the rounded "
           f"reference {same:.4%}")
    assert not torch.isnan(got.float()).any()
    assert (err <= ulp).all(), f"{label}: more than one bf16 ulp off"
    assert same > 0.99
