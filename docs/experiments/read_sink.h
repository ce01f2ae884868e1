// Device helpers of the read microbenchmarks (l2_fabric.cu, dram_stripes.cu): fold what a thread
// reads into one value, and a store that never happens in practice but keeps the loads alive.
#pragma once

__device__ __forceinline__ void fold(int4& acc, int4 v) {
  acc.x ^= v.x;
  acc.y ^= v.y;
  acc.z ^= v.z;
  acc.w ^= v.w;
}
__device__ __forceinline__ void sink(int4 acc, int4* out) {
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x7fffffff) out[threadIdx.x] = acc;  // never, in practice
}
