// kern own kernels: DSpark's in-graph acceptance step (ABI.md 6).  See ABI.md for the contract.
//
// kern_spec_accept: grid (1, 1, 1), block (32, 1, 1); the last dispatch of a DSpark manifest's
//   verify.  Verify ran on rows [a, d_0 ... d_{w-2}] at positions p ... p+w-1 and wrote the
//   greedy token after each row into preds.  The accepted prefix j is the first i < w-1 with
//   d_i != preds[i] (w-1 when every draft matched), the next anchor preds[j] at p' = p + j + 1.
//   The kernel writes the next round's inputs (docs/dspark.md step 7), which the caller copies
//   into the contract's inputs on the device, so it can queue round r + 1 before it has read
//   round r:
//     next_ids[0 .. B)      = preds[j], mask x (B-1)           (the draft's token_ids)
//     next_pos[0 .. B]      = p' + i                           (positions and slots of both)
//     draft_lens[0 .. B)    = p' + B                           (the draft's non-causal block)
//     verify_lens[0 .. B]   = p' + 1 + i                       (verify's causal rows)
//   Why an own kernel: the mined process accepts on its host; nothing captured computes it.
#include <stdint.h>

// Programmatic dependent launch (ABI.md, "PDL"), as in the other own kernels.
#define KERN_GRID_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define KERN_LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")

// w: verify's rows (the `tokens` symbol, >= 1); block: B, 1 <= B <= 31 (the warp writes B + 1
// rows of next_pos / verify_lens); mask: the draft's mask token id.
extern "C" __global__ void __launch_bounds__(32)
kern_spec_accept(const int64_t* __restrict__ ids, const int64_t* __restrict__ preds,
                 const int64_t* __restrict__ positions, int64_t* __restrict__ next_ids,
                 int64_t* __restrict__ next_pos, int32_t* __restrict__ draft_lens,
                 int32_t* __restrict__ verify_lens, int32_t w, int32_t block, int64_t mask) {
    KERN_GRID_WAIT();
    const int lane = threadIdx.x;
    int j = w - 1;                       // every draft accepted
    for (int base = 0; base < w - 1; base += 32) {
        const int i = base + lane;
        const unsigned misses = __ballot_sync(0xffffffffu, i < w - 1 && ids[i + 1] != preds[i]);
        if (misses) {                    // warp-uniform
            j = base + __ffs(misses) - 1;
            break;
        }
    }
    const int64_t anchor = preds[j];
    const int64_t next = positions[0] + j + 1;
    KERN_LAUNCH_DEPENDENTS();
    if (lane < block) {
        next_ids[lane] = lane == 0 ? anchor : mask;
        draft_lens[lane] = (int32_t)(next + block);
    }
    if (lane <= block) {
        next_pos[lane] = next + lane;
        verify_lens[lane] = (int32_t)(next + 1 + lane);
    }
}
