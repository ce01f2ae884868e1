// The copy engine's bulk copies (cp.async.bulk, no tensor map) for the experiments of this
// directory (wgmma_smem.cu, sm_rate.cu): global -> shared, completing on the mbarrier at `bar`
// (shared::cta addresses) with the copy's bytes, which the caller expects on it.
#pragma once

__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes,
                                          unsigned bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// The same copy into both CTAs of a cluster of two (the same shared offsets and barrier in each).
__device__ __forceinline__ void bulk_load_multicast(unsigned dst, const void* src, unsigned bytes,
                                                    unsigned bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1], %2, [%3], %4;" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "h"((unsigned short)3)
      : "memory");
}
