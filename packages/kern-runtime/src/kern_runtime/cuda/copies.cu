// kern-runtime's one own kernel: several small device-to-device copies in one launch.
//
// Why: a sequence (Runtime.run_sequence) fed on the device holds groups of tiny copies (a
// pipelined DSpark round: four 8-64 byte copies before its draft, two before its verify).
// As memcpy nodes each copy is a node of its own; with copy_kernel=True one launch of this
// kernel per group replaces them.  Measured on an H100 (docs/measurements.md, session 19):
// a memcpy node and a node of this kernel cost the same (~0.95 us between small kernels),
// and a DSpark round showed no difference beyond noise, so it is an option, not the
// default.  It is no model kernel: the manifest never names it, and it computes nothing but
// the copies the caller asked for.
//
// Contract: segment s copies bytes[s] bytes from src[s] to dst[s], s < count <= 8; no
// segment's destination overlaps another segment's source or destination (the runtime
// checks). Any grid and block shape; word copies where dst, src and bytes are 4-aligned.
// Launched with programmatic stream serialization: it waits on the grid dependency before
// its first access and lets its dependents launch at once (they wait for its completion).
//
// Regenerate the PTX beside it (tests/test_copies.py checks it is current when nvcc exists):
//   nvcc -ptx -arch=sm_90 -o copies.ptx copies.cu

struct Segs {
    unsigned long long dst[8];
    unsigned long long src[8];
    unsigned int bytes[8];
    int count;
};

extern "C" __global__ void __launch_bounds__(256) kern_rt_copies(const Segs segs) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    const unsigned int t = threadIdx.x + blockIdx.x * blockDim.x, step = blockDim.x * gridDim.x;
    for (int s = 0; s < segs.count; ++s) {
        const unsigned int n = segs.bytes[s];
        const unsigned long long d = segs.dst[s], a = segs.src[s];
        if (((d | a | n) & 3ull) == 0) {
            unsigned int* dw = reinterpret_cast<unsigned int*>(d);
            const unsigned int* aw = reinterpret_cast<const unsigned int*>(a);
            for (unsigned int i = t; i < n / 4; i += step) dw[i] = aw[i];
        } else {
            unsigned char* db = reinterpret_cast<unsigned char*>(d);
            const unsigned char* ab = reinterpret_cast<const unsigned char*>(a);
            for (unsigned int i = t; i < n; i += step) db[i] = ab[i];
        }
    }
}
