"""(session 10's probe, kept as the record of the variants measured in this folder; sources were
the kernels of commit 419c33c)  Write experimental variants of gemv.cu / attn_decode_split.cu (issue 16 probe, session 10).
   python3 mkvar.py SRC_KERNELS_DIR DST_DIR LETTERS
 B: launch_dependents right after griddepcontrol.wait (gemv + attention partial)
 P: .L2::256B prefetch hint on the W loads
 L: bulk L2 prefetch of the whole W tile before the wait (M: capped at 32 KB per tile)
 C: each warp's batch of kUnroll steps is contiguous in k (256 B of a row per warp batch)
"""
import sys, pathlib
src, dst, letters = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
dst.mkdir(parents=True, exist_ok=True)
def sub(text, old, new, count=1):
    assert text.count(old) == count, (old, text.count(old))
    return text.replace(old, new)
g = (src / "gemv.cu").read_text()
a = (src / "attn_decode_split.cu").read_text()
if "B" in letters:
    g = sub(g, '    asm volatile("griddepcontrol.launch_dependents;");\n', '')
    g = sub(g, '    const int nw = blockDim.x >> 5;\n    const int warp = threadIdx.x >> 5, lane',
            '    asm volatile("griddepcontrol.launch_dependents;");\n    const int nw = blockDim.x >> 5;\n    const int warp = threadIdx.x >> 5, lane')
    a = sub(a, '    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");\n}\n\nconstexpr int kMaxSplits',
            '}\n\nconstexpr int kMaxSplits')
    a = sub(a, '    asm volatile("griddepcontrol.wait;" ::: "memory");\n    const int kv_len = kv_lens[t];',
            '    asm volatile("griddepcontrol.wait;" ::: "memory");\n    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");\n    const int kv_len = kv_lens[t];')
if "P" in letters:
    g = sub(g, "ld.global.nc.L1::no_allocate.v4.u32", "ld.global.nc.L1::no_allocate.L2::256B.v4.u32")
if "C" in letters:
    g = sub(g, "(s0 + u * nw) * kStep", "(s0 + u) * kStep", count=3)
    g = sub(g, "int s0 = warp;", "int s0 = warp * kUnroll;")
if "L" in letters or "M" in letters:
    cap = "0x7fffffff" if "L" in letters else "32768"
    g = sub(g, "    int s0 = warp", """    if (threadIdx.x == 0) {                       // session-10 probe: bulk L2 prefetch of the tile
#pragma unroll
        for (int t = 0; t < T; ++t) {
            const int rows_t = min(kCols, lim[t] - base[t]);
            unsigned bytes = (unsigned)min((long long)rows_t * k * 2, (long long)%s);
            bytes &= ~15u;
            const __nv_bfloat16* p = w + (size_t)base[t] * k;
            asm volatile("cp.async.bulk.prefetch.L2.global [%%0], %%1;" :: "l"(p), "r"(bytes) : "memory");
        }
    }
    int s0 = warp""" % cap)
(dst / "gemv.cu").write_text(g)
(dst / "attn_decode_split.cu").write_text(a)
print("variant", letters, "->", dst)
