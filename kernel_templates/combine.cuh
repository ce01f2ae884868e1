// Combine: out[t] = sum over the token's k routed slots, then its S shared chunks, in that fixed
// order, in fp32, rounded once. No atomics: the forward is deterministic. One thread per 8
// outputs: two 16-byte loads of fp32 y per slot, one 16-byte store.
#pragma once

#include "common.cuh"

namespace rt_moe {

template <typename D, int H, int SLOTS>
struct Combine {
  static constexpr int kThreads = 256;
  static constexpr int kSmemBytes = 0;
  static_assert(H % 8 == 0, "rows are moved in 16-byte chunks of 8 elements");

  static __device__ void run(const CombineParams& p) {
    grid_dependency_wait();  // y of the down GEMM
    grid_dependency_trigger();
    const long long index = (long long)blockIdx.x * kThreads + threadIdx.x;
    if (index >= (long long)p.tokens * (H / 8)) return;
    const long long token = index / (H / 8), chunk = index % (H / 8);
    const float4* y = reinterpret_cast<const float4*>(p.y) + (token * SLOTS * (H / 8) + chunk) * 2;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      const float4 lo = y[(long long)s * (H / 4)], hi = y[(long long)s * (H / 4) + 1];
      acc[0] += lo.x;
      acc[1] += lo.y;
      acc[2] += lo.z;
      acc[3] += lo.w;
      acc[4] += hi.x;
      acc[5] += hi.y;
      acc[6] += hi.z;
      acc[7] += hi.w;
    }
    reinterpret_cast<Vec8*>(p.out)[index] = pack8<D>(acc);
  }
};

}  // namespace rt_moe
