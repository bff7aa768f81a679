// kern own kernels: tiled causal GQA flash attention (prefill chunks), and the tensor-core
// split-KV partial for the few rows of one sequence (verify, the DSpark draft).  See ABI.md.
//
// kern_attn_prefill_bf16_d{64,128}: grid (ceil_div(tokens, 64), n_q_heads), block (128),
// dynamic shared memory 81920 (d128) / 40960 (d64) bytes.
//
// Block (x, h) computes 64 query rows of head h: row block mb = gridDim.x - 1 - x (the
// longest rows start first).  Query row i sits at position pos0 + i and sees keys
// 0..pos0+i.  Four warps own 16 rows each; S = Q·Kᵀ and O += P·V run on tensor cores
// (mma.sync m16n8k16 bf16 → f32), online softmax in f32 (log2 domain), K/V tiles of 64
// keys double-buffered in shared memory with cp.async (XOR-swizzled 16-byte chunks).
//
// kern_attn_rows_partial_bf16_d{64,128} (ABI.md 3b′): grid (n_kv_heads, S, 1), block (128),
// the same dynamic shared memory.  Step 1 of a split-KV attention whose step 2 is
// attn_decode_split.cu's kern_attn_decode_reduce (same scratch, same split rule): for the
// T rows of ONE sequence (every row the same pages; kv_lens[t] keys for row t), block
// (hk, s) computes split s of every row t < T and every query head of kv head hk at once:
// its 64-row query tile holds row r = t * G + g (G = n_q_heads / n_kv_heads, T * G <= 64),
// so the keys of the split are read once for all T * G queries (more than 64: the block
// repeats the walk per 64-row tile; verify has T * G <= 64), and S = Q·Kᵀ, O += P·V run
// on tensor cores as in the prefill.  Row t uses A_t = active_splits(kv_lens[t], S, s_min, T)
// splits of chunk_t = ceil(L_t / A_t) keys (attn_decode_split.cu's rule, bit for bit the
// same split boundaries); the block walks the union of its rows' ranges of split s and masks
// each (row, key) to that row's own range.  Why own: the CUDA-core partial gives each
// (kv head, split, row) a block that walks its keys alone; with 8 verify rows its 128 blocks
// walk 8x a decode block's keys (H200, Qwen3-4B shape: 10.2 us a layer against decode's 6.8).
//
// Paged pool: one sequence, whose key j lives in slot
//   block_table[j >> 4] * kPageTokens + (j & 15)     (row 0 of the table)
// A 64-key tile is kTilePages = 4 whole pages; their table entries are loaded one tile
// ahead of the tile's cp.async (see TilePages).
//
// Programmatic dependent launch: griddepcontrol.wait before the first global access,
// griddepcontrol.launch_dependents once the key tiles are consumed (both no-ops without PDL).
#include <cuda_bf16.h>
#include <stdint.h>
#include <math_constants.h>

namespace {

constexpr int kBM = 64;
constexpr int kBN = 64;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kPageTokens = 16;  // slots per page of the KV pool (caller contract PAGE_TOKENS)
constexpr int kPageShift = 4;    // log2(kPageTokens)
constexpr int kTilePages = kBN / kPageTokens;
static_assert(kPageTokens == 1 << kPageShift && kBN % kPageTokens == 0,
              "a key tile is whole pages");

// The kTilePages table entries of one key tile (tile t: keys t*kBN .. t*kBN+kBN-1).  Pages
// at or beyond ceil(kv_end / kPageTokens) are not read (0): their keys are never loaded.
struct TilePages {
    int page[kTilePages];

    __device__ __forceinline__ void load(const int* __restrict__ table, int tile, int kv_end) {
#pragma unroll
        for (int p = 0; p < kTilePages; ++p) {
            const int idx = tile * kTilePages + p;
            page[p] = idx * kPageTokens < kv_end ? table[idx] : 0;
        }
    }
};

// element offset of 16-byte chunk c of row `row` in a [rows][D] bf16 tile
template <int D>
__device__ __forceinline__ int swz(int row, int c) {
    return row * D + ((c ^ (row & 7)) << 3);
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    const int n = valid ? 16 : 0;   // 0: zero-fill, nothing read
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* smem) {
    const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* smem) {
    const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void grid_dependency_wait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

__device__ __forceinline__ void launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;");
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);   // .x (low 16 bits) = lo
    return *reinterpret_cast<uint32_t*>(&v);
}

// cp.async of one key tile's K and V rows: tile row `row` (< kBN) is key key0 + row, in slot
// pages.page[row / kPageTokens] * kPageTokens + row % kPageTokens; keys >= key_end are
// zero-filled, nothing read (k_cache / v_cache stand in as their addresses).  kp, vp: the
// kv head's K and V base; dK, dV: [kBN][D] swizzled tiles in shared memory.
template <int D>
__device__ __forceinline__ void load_kv_tile(
    __nv_bfloat16* dK, __nv_bfloat16* dV, const TilePages& pages, int key0, int key_end,
    const __nv_bfloat16* kp, const __nv_bfloat16* vp, int64_t k_stride_slot,
    int64_t v_stride_slot, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache, int tid) {
    // Thread tid copies chunk c = tid % CPR of the tile rows tid / CPR + n * RS (n < RPT).
    // RS is 8 (d128) or 16 (d64), so row n lies in page (n * RS) / kPageTokens of the tile
    // whatever tid is: the page index is a compile-time constant per n.
    constexpr int CPR = D / 8;                    // 16-byte chunks per row
    constexpr int RS = kThreads / CPR;            // rows copied per pass of the block
    constexpr int RPT = kBN / RS;                 // rows copied per thread
    static_assert(kThreads % CPR == 0 && kBN % RS == 0 && kPageTokens % RS == 0,
                  "a thread's tile row n stays in page n * RS / kPageTokens");
    const int c = tid % CPR;
#pragma unroll
    for (int n = 0; n < RPT; ++n) {
        const int row = tid / CPR + n * RS;
        const int key = key0 + row;
        const bool valid = key < key_end;
        const int64_t slot = (int64_t)pages.page[n * RS / kPageTokens] * kPageTokens +
                             (row & (kPageTokens - 1));
        const __nv_bfloat16* ks = valid ? kp + slot * k_stride_slot + c * 8 : k_cache;
        const __nv_bfloat16* vs = valid ? vp + slot * v_stride_slot + c * 8 : v_cache;
        cp_async16(dK + swz<D>(row, c), ks, valid);
        cp_async16(dV + swz<D>(row, c), vs, valid);
    }
}

// This warp's 16 query rows (warp * 16 ..) of the [kBM][D] swizzled Q tile sQ, as the mma A
// fragments tile_scores takes (D / 16 k16 steps).
template <int D>
__device__ __forceinline__ void load_q_frags(uint32_t (&qf)[D / 16][4], const __nv_bfloat16* sQ,
                                             int warp, int lane) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
        const int row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int c = ks * 2 + (lane >> 4);
        ldsm_x4(qf[ks], sQ + swz<D>(row, c));
    }
}

// This warp's 16 query rows against one key tile, on tensor cores: s = Q·Kᵀ (raw dot
// products, f32).  qf: the rows' Q fragments (mma A layout, D / 16 k16 steps); tK: a
// [kBN][D] swizzled key tile in shared memory.  s[nb][e], C layout: thread (g = lane >> 2,
// tg = lane & 3) holds row g (e = 0, 1) or g + 8 (e = 2, 3), key nb * 8 + 2 * tg + (e & 1).
template <int D>
__device__ __forceinline__ void tile_scores(float (&s)[kBN / 8][4], const uint32_t (&qf)[D / 16][4],
                                            const __nv_bfloat16* tK, int lane) {
    constexpr int KS = D / 16, NS = kBN / 8;
#pragma unroll
    for (int i = 0; i < NS; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
        for (int np = 0; np < NS / 2; ++np) {
            uint32_t b[4];
            const int row = np * 16 + (lane & 7) + (lane >> 4) * 8;
            const int c = ks * 2 + ((lane >> 3) & 1);
            ldsm_x4(b, tK + swz<D>(row, c));
            mma16816(s[2 * np], qf[ks], b[0], b[1]);
            mma16816(s[2 * np + 1], qf[ks], b[2], b[3]);
        }
    }
}

// One key tile of the online softmax and O += P·V for this thread's rows a (g) and b (g + 8).
// s: the tile's scores in the log2 domain (masked keys -inf), tile_scores' layout; becomes
// P = exp2(s - m).  m_*: running row max (log2 domain, -inf until a key is kept); l_*: this
// thread's share of the row sum (its two columns of each n8 block; the quad sum is the
// caller's); o: the unnormalised [D / 8][4] accumulator (C layout, columns nd * 8 + 2 * tg),
// rescaled to the new max, then += P·V with P rounded to bf16.  tV: the tile's [kBN][D]
// swizzled values in shared memory.  A row whose keys are all masked so far stays m = -inf,
// l = 0, o = 0.
template <int D>
__device__ __forceinline__ void softmax_pv(float (&s)[kBN / 8][4], float (&o)[D / 8][4],
                                           float& m_a, float& m_b, float& l_a, float& l_b,
                                           const __nv_bfloat16* tV, int lane) {
    constexpr int ND = D / 8, NS = kBN / 8;
    float mx_a = m_a, mx_b = m_b;
#pragma unroll
    for (int nb = 0; nb < NS; ++nb) {
        mx_a = fmaxf(mx_a, fmaxf(s[nb][0], s[nb][1]));
        mx_b = fmaxf(mx_b, fmaxf(s[nb][2], s[nb][3]));
    }
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
    const float use_a = (mx_a == -CUDART_INF_F) ? 0.f : mx_a;
    const float use_b = (mx_b == -CUDART_INF_F) ? 0.f : mx_b;
    const float corr_a = exp2f(m_a - use_a);
    const float corr_b = exp2f(m_b - use_b);
    m_a = mx_a;
    m_b = mx_b;
    float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
    for (int nb = 0; nb < NS; ++nb) {
        s[nb][0] = exp2f(s[nb][0] - use_a);
        s[nb][1] = exp2f(s[nb][1] - use_a);
        s[nb][2] = exp2f(s[nb][2] - use_b);
        s[nb][3] = exp2f(s[nb][3] - use_b);
        sum_a += s[nb][0] + s[nb][1];
        sum_b += s[nb][2] + s[nb][3];
    }
    l_a = l_a * corr_a + sum_a;
    l_b = l_b * corr_b + sum_b;
#pragma unroll
    for (int nd = 0; nd < ND; ++nd) {
        o[nd][0] *= corr_a; o[nd][1] *= corr_a;
        o[nd][2] *= corr_b; o[nd][3] *= corr_b;
    }
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
        uint32_t a[4];
        a[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
        a[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
        a[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        a[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < ND / 2; ++dp) {
            uint32_t b[4];
            const int row = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            const int c = dp * 2 + (lane >> 4);
            ldsm_x4_t(b, tV + swz<D>(row, c));
            mma16816(o[2 * dp], a, b[0], b[1]);
            mma16816(o[2 * dp + 1], a, b[2], b[3]);
        }
    }
}

template <int D>
__device__ __forceinline__ void prefill(
    const __nv_bfloat16* __restrict__ q,
    const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache,
    const int* __restrict__ pos0_ptr,
    const int* __restrict__ block_table,
    __nv_bfloat16* __restrict__ out,
    int q_row_stride,
    int64_t k_stride_slot, int64_t k_stride_head,
    int64_t v_stride_slot, int64_t v_stride_head,
    int n_q_heads, int n_kv_heads, int tokens, float scale)
{
    constexpr int CPR = D / 8;          // 16-byte chunks per row
    constexpr int KS = D / 16;          // k16 steps over the head dim
    constexpr int ND = D / 8;           // n8 blocks of the output
    constexpr int NS = kBN / 8;         // n8 blocks of a score tile

    extern __shared__ __align__(128) unsigned char smem_raw[];
    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw);
    __nv_bfloat16* sK = sQ + kBM * D;            // 2 buffers of kBN * D
    __nv_bfloat16* sV = sK + 2 * kBN * D;        // 2 buffers of kBN * D

    grid_dependency_wait();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int mb = gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y;
    const int hk = h / (n_q_heads / n_kv_heads);
    const int r0 = mb * kBM;
    if (r0 >= tokens) return;
    const int pos0 = *pos0_ptr;
    const int rows_here = min(kBM, tokens - r0);
    const int kv_end = pos0 + r0 + rows_here;            // keys [0, kv_end) are needed
    const int n_tiles = (kv_end + kBN - 1) / kBN;
    const __nv_bfloat16* kp = k_cache + (int64_t)hk * k_stride_head;
    const __nv_bfloat16* vp = v_cache + (int64_t)hk * v_stride_head;

    // Q tile (rows beyond `tokens` zero-filled)
    for (int i = tid; i < kBM * CPR; i += kThreads) {
        const int row = i / CPR, c = i % CPR;
        const bool valid = r0 + row < tokens;
        const __nv_bfloat16* src = valid ? q + (int64_t)(r0 + row) * q_row_stride + (int64_t)h * D + c * 8 : q;
        cp_async16(sQ + swz<D>(row, c), src, valid);
    }
    auto load_kv = [&](int tile, int buf, const TilePages& pages) {
        load_kv_tile<D>(sK + buf * kBN * D, sV + buf * kBN * D, pages, tile * kBN, kv_end, kp, vp,
                        k_stride_slot, v_stride_slot, k_cache, v_cache, tid);
    };
    // pages of the tile to be loaded next: tile 1 once tile 0 is issued, then one tile ahead
    TilePages next;
    next.load(block_table, 0, kv_end);
    load_kv(0, 0, next);
    cp_async_commit();
    next.load(block_table, 1, kv_end);

    const float sl2 = scale * kLog2e;
    const int g = lane >> 2, tg = lane & 3;
    // absolute positions of this thread's two rows
    const int row_a = r0 + warp * 16 + g;
    const int pa = pos0 + row_a, pb = pa + 8;
    const int block_min_pos = pos0 + r0;

    uint32_t qf[KS][4];
    float o[ND][4];
#pragma unroll
    for (int i = 0; i < ND; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m_a = -CUDART_INF_F, m_b = -CUDART_INF_F, l_a = 0.f, l_b = 0.f;

    for (int j = 0; j < n_tiles; ++j) {
        const int buf = j & 1;
        if (j + 1 < n_tiles) {
            load_kv(j + 1, buf ^ 1, next);
            cp_async_commit();
            next.load(block_table, j + 2, kv_end);   // used by the next iteration
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (j == 0) load_q_frags<D>(qf, sQ, warp, lane);
        const __nv_bfloat16* tK = sK + buf * kBN * D;
        const __nv_bfloat16* tV = sV + buf * kBN * D;

        float s[NS][4];
        tile_scores<D>(s, qf, tK, lane);

        // scale into the log2 domain, causal mask
        const bool need_mask = j * kBN + kBN - 1 > block_min_pos;
#pragma unroll
        for (int nb = 0; nb < NS; ++nb) {
#pragma unroll
            for (int e = 0; e < 4; ++e) s[nb][e] *= sl2;
            if (need_mask) {
                const int key = j * kBN + nb * 8 + 2 * tg;
                if (key > pa) s[nb][0] = -CUDART_INF_F;
                if (key + 1 > pa) s[nb][1] = -CUDART_INF_F;
                if (key > pb) s[nb][2] = -CUDART_INF_F;
                if (key + 1 > pb) s[nb][3] = -CUDART_INF_F;
            }
        }

        softmax_pv<D>(s, o, m_a, m_b, l_a, l_b, tV, lane);   // online softmax, O += P V
        __syncthreads();   // buffer `buf` is refilled by the next iteration's prefetch
    }
    launch_dependents();

    // finish: full row sums across the quad, normalise, store
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
    const float inv_a = 1.f / l_a, inv_b = 1.f / l_b;
    const int row_b = row_a + 8;
#pragma unroll
    for (int nd = 0; nd < ND; ++nd) {
        const int col = nd * 8 + 2 * tg;
        if (row_a < tokens) {
            *reinterpret_cast<__nv_bfloat162*>(out + ((int64_t)row_a * n_q_heads + h) * D + col) =
                __floats2bfloat162_rn(o[nd][0] * inv_a, o[nd][1] * inv_a);
        }
        if (row_b < tokens) {
            *reinterpret_cast<__nv_bfloat162*>(out + ((int64_t)row_b * n_q_heads + h) * D + col) =
                __floats2bfloat162_rn(o[nd][2] * inv_b, o[nd][3] * inv_b);
        }
    }
}


// attn_decode_split.cu's split rule, repeated here because the rows partial must split the
// keys exactly as that file's reduce merges them (kKeysPerSplit = 512 there too; the GPU
// test checks both kernels' outputs against each other).
constexpr int kRowsKeysPerSplit = 512;
__device__ __forceinline__ int rows_active_splits(int kv_len, int splits, int s_min, int rows) {
    const int floor_ = max(1, s_min / max(1, rows));
    const int want = (kv_len + kRowsKeysPerSplit - 1) / kRowsKeysPerSplit;
    return max(1, min(splits, max(floor_, want)));
}

// Row t's keys in split `split`: [begin, end) (empty when the row has fewer splits or keys).
__device__ __forceinline__ void rows_range(int kv_len, int split, int splits, int s_min,
                                           int rows, int& begin, int& end, bool& active) {
    const int a = rows_active_splits(kv_len, splits, s_min, rows);
    active = split < a;
    const int chunk = (kv_len + a - 1) / a;
    begin = active ? min(split * chunk, kv_len) : 0;
    end = active ? min(begin + chunk, kv_len) : 0;
}

template <int D>
__device__ __forceinline__ void rows_partial(
    const __nv_bfloat16* __restrict__ q,
    const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache,
    const int* __restrict__ kv_lens, const int* __restrict__ block_table,
    float* __restrict__ part_ml, float* __restrict__ part_acc,
    int q_row_stride,
    int64_t k_stride_slot, int64_t k_stride_head,
    int64_t v_stride_slot, int64_t v_stride_head,
    int n_q_heads, int n_kv_heads, float scale, int s_min, int table_stride, int tokens)
{
    constexpr int CPR = D / 8;
    constexpr int KS = D / 16;
    constexpr int ND = D / 8;
    constexpr int NS = kBN / 8;

    extern __shared__ __align__(128) unsigned char smem_raw[];
    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw);
    __nv_bfloat16* sK = sQ + kBM * D;
    __nv_bfloat16* sV = sK + 2 * kBN * D;

    grid_dependency_wait();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int hk = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
    const int group = n_q_heads / n_kv_heads;
    const int nrows = tokens * group;     // query rows; tiles of kBM, one after another
    // The union of the rows' ranges of this split, and the longest row (whose table the
    // pages come from): thread i reads rows i, i + 128, ... (one load latency for T <= 128,
    // not T in a row), then a block reduction.
    __shared__ int red_ub[kWarps], red_ue[kWarps], red_any[kWarps];
    __shared__ long long red_long[kWarps];
    int ub = 0x7fffffff, ue = 0, any = 0;
    long long lng = 0;                    // (kv_len << 32) | row: the longest row, lowest first
    for (int t = tid; t < tokens; t += kThreads) {
        const int len = kv_lens[t];
        int b, e;
        bool act;
        rows_range(len, split, splits, s_min, tokens, b, e, act);
        any |= act;
        if (b < e) { ub = min(ub, b); ue = max(ue, e); }
        lng = max(lng, ((long long)len << 32) | (unsigned)(0x7fffffff - t));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        ub = min(ub, __shfl_xor_sync(0xffffffffu, ub, off));
        ue = max(ue, __shfl_xor_sync(0xffffffffu, ue, off));
        any |= __shfl_xor_sync(0xffffffffu, any, off);
        lng = max(lng, __shfl_xor_sync(0xffffffffu, lng, off));
    }
    if (lane == 0) {
        red_ub[warp] = ub; red_ue[warp] = ue; red_any[warp] = any; red_long[warp] = lng;
    }
    __syncthreads();
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
        ub = min(ub, red_ub[w]); ue = max(ue, red_ue[w]);
        any |= red_any[w]; lng = max(lng, red_long[w]);
    }
    if (!any) { launch_dependents(); return; }
    const int t_long = 0x7fffffff - (int)(lng & 0xffffffffll);
    const int* table = block_table + (int64_t)t_long * table_stride;
    const int first = ue > 0 ? (ub & ~(kPageTokens - 1)) : 0;   // a tile starts on a page
    const int n_tiles = ue > first ? (ue - first + kBN - 1) / kBN : 0;
    const __nv_bfloat16* kp = k_cache + (int64_t)hk * k_stride_head;
    const __nv_bfloat16* vp = v_cache + (int64_t)hk * v_stride_head;

    const float sl2 = scale * kLog2e;
    const int g = lane >> 2, tg = lane & 3;
    auto tile_pages = [&](TilePages& tp, int tile) {
#pragma unroll
        for (int p = 0; p < kTilePages; ++p) {
            const int key = first + tile * kBN + p * kPageTokens;
            tp.page[p] = key < ue ? table[key >> kPageShift] : 0;
        }
    };
    auto load_kv = [&](int tile, int buf, const TilePages& pages) {
        load_kv_tile<D>(sK + buf * kBN * D, sV + buf * kBN * D, pages, first + tile * kBN, ue, kp,
                        vp, k_stride_slot, v_stride_slot, k_cache, v_cache, tid);
    };
    for (int r0 = 0; r0 < nrows; r0 += kBM) {
        for (int i = tid; i < kBM * CPR; i += kThreads) {
            const int row = r0 + i / CPR, c = i % CPR;
            const bool valid = row < nrows;
            const int t = row / group, hq = hk * group + row % group;
            const __nv_bfloat16* src =
                valid ? q + (int64_t)t * q_row_stride + (int64_t)hq * D + c * 8 : q;
            cp_async16(sQ + swz<D>(row - r0, c), src, valid);
        }
        TilePages next;
        if (n_tiles > 0) {
            tile_pages(next, 0);
            load_kv(0, 0, next);
        }
        cp_async_commit();                    // with the Q tile
        if (n_tiles > 1) tile_pages(next, 1);

        const int row_a = r0 + warp * 16 + g, row_b = row_a + 8;
        const bool warp_rows = r0 + warp * 16 < nrows;
        // this thread's two query rows: sequence row, its key range of this split
        int ba = 0, ea = 0, bb = 0, eb = 0;
        bool act_a = false, act_b = false;
        const int ta = row_a / group, tb = row_b / group;
        if (row_a < nrows) rows_range(kv_lens[ta], split, splits, s_min, tokens, ba, ea, act_a);
        if (row_b < nrows) rows_range(kv_lens[tb], split, splits, s_min, tokens, bb, eb, act_b);

        uint32_t qf[KS][4];
        float o[ND][4];
#pragma unroll
        for (int i = 0; i < ND; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
        float m_a = -CUDART_INF_F, m_b = -CUDART_INF_F, l_a = 0.f, l_b = 0.f;

        if (n_tiles == 0) cp_async_wait<0>();
        for (int j = 0; j < n_tiles; ++j) {
            const int buf = j & 1;
            if (j + 1 < n_tiles) {
                load_kv(j + 1, buf ^ 1, next);
                cp_async_commit();
                if (j + 2 < n_tiles) tile_pages(next, j + 2);
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
            if (warp_rows) {
                if (j == 0) load_q_frags<D>(qf, sQ, warp, lane);
                const __nv_bfloat16* tK = sK + buf * kBN * D;
                const __nv_bfloat16* tV = sV + buf * kBN * D;
                float s[NS][4];
                tile_scores<D>(s, qf, tK, lane);
                // scale into the log2 domain; each row keeps only its own range of the split
#pragma unroll
                for (int nb = 0; nb < NS; ++nb) {
                    const int key = first + j * kBN + nb * 8 + 2 * tg;
                    s[nb][0] = (key >= ba && key < ea) ? s[nb][0] * sl2 : -CUDART_INF_F;
                    s[nb][1] = (key + 1 >= ba && key + 1 < ea) ? s[nb][1] * sl2 : -CUDART_INF_F;
                    s[nb][2] = (key >= bb && key < eb) ? s[nb][2] * sl2 : -CUDART_INF_F;
                    s[nb][3] = (key + 1 >= bb && key + 1 < eb) ? s[nb][3] * sl2 : -CUDART_INF_F;
                }
                softmax_pv<D>(s, o, m_a, m_b, l_a, l_b, tV, lane);
            }
            __syncthreads();
        }
        // the split's (m, l) and unnormalised accumulator, as attn_decode_split.cu's partial
        l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
        l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
        l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
        l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
        // scratch row of (sequence row, query head, split)
        const int64_t pa = ((int64_t)ta * n_q_heads + hk * group + row_a % group) * splits + split;
        const int64_t pb = ((int64_t)tb * n_q_heads + hk * group + row_b % group) * splits + split;
        if (tg == 0) {
            if (act_a) { part_ml[pa * 2] = m_a; part_ml[pa * 2 + 1] = l_a; }
            if (act_b) { part_ml[pb * 2] = m_b; part_ml[pb * 2 + 1] = l_b; }
        }
#pragma unroll
        for (int nd = 0; nd < ND; ++nd) {
            const int col = nd * 8 + 2 * tg;
            if (act_a)
                *reinterpret_cast<float2*>(part_acc + pa * D + col) = make_float2(o[nd][0], o[nd][1]);
            if (act_b)
                *reinterpret_cast<float2*>(part_acc + pb * D + col) = make_float2(o[nd][2], o[nd][3]);
        }
        __syncthreads();                  // sQ and the K/V buffers are refilled by the next tile
    }
    launch_dependents();
}

}  // namespace

#define KERN_PREFILL_SYMBOL(D, MINB)                                                          \
extern "C" __global__ void __launch_bounds__(kThreads, MINB)                             \
kern_attn_prefill_bf16_d##D(                                                              \
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,       \
    const __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ pos0,              \
    const int* __restrict__ block_table, __nv_bfloat16* __restrict__ out,                 \
    int q_row_stride, int64_t k_stride_slot, int64_t k_stride_head,                       \
    int64_t v_stride_slot, int64_t v_stride_head, int n_q_heads, int n_kv_heads,          \
    int tokens, float scale)                                                              \
{                                                                                         \
    prefill<D>(q, k_cache, v_cache, pos0, block_table, out, q_row_stride, k_stride_slot,  \
               k_stride_head, v_stride_slot, v_stride_head, n_q_heads, n_kv_heads,        \
               tokens, scale);                                                            \
}

KERN_PREFILL_SYMBOL(64, 3)
KERN_PREFILL_SYMBOL(128, 2)

#define KERN_ROWS_SYMBOL(D, MINB)                                                             \
extern "C" __global__ void __launch_bounds__(kThreads, MINB)                             \
kern_attn_rows_partial_bf16_d##D(                                                         \
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,       \
    const __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ kv_lens,           \
    const int* __restrict__ block_table, float* __restrict__ part_ml,                     \
    float* __restrict__ part_acc, int q_row_stride, int64_t k_stride_slot,                \
    int64_t k_stride_head, int64_t v_stride_slot, int64_t v_stride_head, int n_q_heads,   \
    int n_kv_heads, float scale, int s_min, int table_stride, int tokens)                 \
{                                                                                         \
    rows_partial<D>(q, k_cache, v_cache, kv_lens, block_table, part_ml, part_acc,         \
                    q_row_stride, k_stride_slot, k_stride_head, v_stride_slot,            \
                    v_stride_head, n_q_heads, n_kv_heads, scale, s_min, table_stride,     \
                    tokens);                                                              \
}

KERN_ROWS_SYMBOL(64, 3)
KERN_ROWS_SYMBOL(128, 2)
