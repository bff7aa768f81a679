// Probe builds only (probe_attn_timeline.py; 0 in the build, where the KERN_ATL macros are
// empty and attn_decode_cluster.cu's code is unchanged): thread 0 of each block of the
// cluster decode attention reads %globaltimer at eight points and appends one record to a
// buffer the probe sets — where the decode attention's ~6 us a layer go between its launch,
// its wait, its q/k rope, its key pass, the cluster barriers and the merge.
//   t[0] entry, t[1] first key batch issued (before the wait), t[2] wait returned, t[3] q
//   (and the new k / v) ready in shared memory, t[4] the block's pass and in-block merge
//   done, t[5] first cluster barrier passed, t[6] rank 0's merge done (other ranks: right
//   after t[5]), t[7] second cluster barrier passed (the block exits).
#pragma once

#ifndef KERN_ATTN_TIMELINE
#define KERN_ATTN_TIMELINE 0
#endif
#if KERN_ATTN_TIMELINE
struct KernAtlRecord {               // ns of %globaltimer; tag identifies the launch
    unsigned long long tag, t[8];    // (its out pointer)
    unsigned int sm, block;          // block = x + gridDim.x * (y + gridDim.y * z)
};
extern "C" {                         // unmangled: the probe sets them by name
__device__ KernAtlRecord* kern_attn_tl = nullptr;
__device__ unsigned int kern_attn_tl_n = 0;       // records appended
__device__ unsigned int kern_attn_tl_cap = 0;     // records the buffer holds
}

__device__ __forceinline__ unsigned long long* kern_atl_slots() {
    __shared__ unsigned long long t[8];
    return t;
}
#define KERN_ATL(i)                                                                        \
    do {                                                                                   \
        if (threadIdx.x == 0) {                                                            \
            unsigned long long v;                                                          \
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v) :: "memory");              \
            kern_atl_slots()[i] = v;                                                       \
        }                                                                                  \
    } while (0)
__device__ __forceinline__ void kern_atl_record(const void* tag) {
    if (threadIdx.x != 0) return;
    const unsigned int slot = atomicAdd(&kern_attn_tl_n, 1u);
    if (kern_attn_tl == nullptr || slot >= kern_attn_tl_cap) return;
    KernAtlRecord& r = kern_attn_tl[slot];
    r.tag = reinterpret_cast<unsigned long long>(tag);
    for (int i = 0; i < 8; ++i) r.t[i] = kern_atl_slots()[i];
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r.sm));
    r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}
#define KERN_ATL_RECORD(tag) kern_atl_record(tag)
#else
#define KERN_ATL(i) do {} while (0)
#define KERN_ATL_RECORD(tag) do {} while (0)
#endif
