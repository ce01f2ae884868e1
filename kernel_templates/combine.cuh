// Combine: out[t] = sum over the token's k routed slots, then its S shared chunks, in that fixed
// order, in fp32, rounded once. No atomics: the forward is deterministic. One thread per 8
// outputs (16-byte loads and stores).
#pragma once

#include "common.cuh"

namespace rt_moe {

template <typename D, int H, int SLOTS>
struct Combine {
  static constexpr int kThreads = 256;
  static constexpr int kSmemBytes = 0;
  static_assert(H % 8 == 0, "rows are moved in 16-byte chunks of 8 elements");

  static __device__ void run(const CombineParams& p) {
    const long long index = (long long)blockIdx.x * kThreads + threadIdx.x;
    if (index >= (long long)p.tokens * (H / 8)) return;
    const long long token = index / (H / 8), chunk = index % (H / 8);
    const Vec8* y = reinterpret_cast<const Vec8*>(p.y) + token * SLOTS * (H / 8) + chunk;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      float v[8];
      unpack8<D>(y[(long long)s * (H / 8)], v);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] += v[i];
    }
    reinterpret_cast<Vec8*>(p.out)[index] = pack8<D>(acc);
  }
};

}  // namespace rt_moe
