// Probe builds only (kernels/probe_*_timeline.py): thread 0 of each block reads %globaltimer
// at N points of a kernel (KERN_TIMELINE_STAMP) and at its end appends one record to a buffer
// the probe sets by name (kern_tl, kern_tl_n, kern_tl_cap: one buffer per module).  Included
// only under a -D KERN_*_TIMELINE=1 switch (gemv_core.cuh, attn_decode_cluster.cu): the build's
// code has none of it.
#pragma once

template <int N>
struct KernTlRecord {                // ns of %globaltimer; tag identifies the launch
    unsigned long long tag, t[N];
    unsigned int sm, block;          // block = x + gridDim.x * (y + gridDim.y * z)
};
extern "C" {                         // unmangled: the probe sets them by name
__device__ void* kern_tl = nullptr;               // KernTlRecord<N>[kern_tl_cap]
__device__ unsigned int kern_tl_n = 0;            // records appended
__device__ unsigned int kern_tl_cap = 0;          // records the buffer holds
}

template <int N>
__device__ __forceinline__ unsigned long long* kern_tl_slots() {
    __shared__ unsigned long long t[N];
    return t;
}

template <int N>
__device__ __forceinline__ void kern_tl_stamp(int i) {
    if (threadIdx.x == 0) {
        unsigned long long v;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v) :: "memory");
        kern_tl_slots<N>()[i] = v;
    }
}

template <int N>
__device__ __forceinline__ void kern_tl_append(const void* tag) {
    if (threadIdx.x != 0) return;
    const unsigned int slot = atomicAdd(&kern_tl_n, 1u);
    if (kern_tl == nullptr || slot >= kern_tl_cap) return;
    KernTlRecord<N>& r = static_cast<KernTlRecord<N>*>(kern_tl)[slot];
    r.tag = reinterpret_cast<unsigned long long>(tag);
    for (int i = 0; i < N; ++i) r.t[i] = kern_tl_slots<N>()[i];
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r.sm));
    r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}
