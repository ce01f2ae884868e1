// Combine: out[t] = sum over the token's k routed slots, then its S shared chunks, in that fixed
// order, in fp32, rounded once. No atomics: the forward is deterministic. One thread per 4
// outputs: one 16-byte load of fp32 y per slot (a warp reads 512 contiguous bytes of each slot's
// row), marked streaming (y is read once), and one 8-byte store. (The version before, 8 outputs
// a thread with two 16-byte loads per slot, read 6.8 GB from DRAM for 4.2 GB of y at DeepSeek-V3
// T = 16384 on the H200, per ncu; this one was not profiled yet.)
#pragma once

#include "common.cuh"

namespace rt_moe {

template <typename D, int H, int SLOTS>
struct Combine {
  static constexpr int kThreads = 256;
  static constexpr int kSmemBytes = 0;
  static constexpr int kChunks = H / 4;  // per row
  static_assert(H % 8 == 0, "rows are moved in 16-byte chunks of 8 elements");

  static __device__ void run(const CombineParams& p) {
    grid_dependency_trigger();  // the next kernel may launch now; it waits for this one
    grid_dependency_wait();     // y of the down GEMM
    const long long index = (long long)blockIdx.x * kThreads + threadIdx.x;
    // Every other stage of the forward has completed: zero its counters for the next forward.
    for (long long i = index; i < p.counter_ints; i += (long long)gridDim.x * kThreads) {
      p.counters[i] = 0;
    }
    if (index >= (long long)p.tokens * kChunks) return;
    const long long token = index / kChunks, chunk = index % kChunks;
    const float4* y = reinterpret_cast<const float4*>(p.y) + token * SLOTS * kChunks + chunk;
    float4 v[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) v[s] = __ldcs(y + (long long)s * kChunks);
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      acc[0] += v[s].x;
      acc[1] += v[s].y;
      acc[2] += v[s].z;
      acc[3] += v[s].w;
    }
    uint2 packed;
    packed.x = DTypeOps<D>::pack2(acc[0], acc[1]);
    packed.y = DTypeOps<D>::pack2(acc[2], acc[3]);
    reinterpret_cast<uint2*>(p.out)[index] = packed;
  }
};

}  // namespace rt_moe
