// Combine: out[t] = sum over the token's k routed slots, then its S shared chunks, in that fixed
// order, in fp32, rounded once. No atomics: the forward is deterministic. One thread per 16 bytes
// of each slot's y row: 4 outputs with fp32 y, 8 with fp16 (Y: YOps in common.cuh, whose
// kUnscale the sum is multiplied by, exactly). One 16-byte load a slot (a warp reads 512
// contiguous bytes of each slot's row), marked streaming (y is read once), and one 8- or 16-byte
// store. (The version before, 8 outputs a thread with two 16-byte loads of fp32 per slot, read
// 6.8 GB from DRAM for 4.2 GB of y at DeepSeek-V3 T = 16384 on the H200, per ncu.)
#pragma once

#include "common.cuh"

namespace rt_moe {

template <typename D, int H, int SLOTS, typename Y = float>
struct Combine {
  static constexpr int kThreads = 256;
  static constexpr int kSmemBytes = 0;
  static constexpr int kOutputs = 16 / YOps<Y>::kBytes;  // per thread
  static constexpr int kChunks = H / kOutputs;           // per row
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
    const uint4* y = reinterpret_cast<const uint4*>(p.y) + token * SLOTS * kChunks + chunk;
    uint4 v[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) v[s] = __ldcs(y + (long long)s * kChunks);
    float acc[kOutputs];
#pragma unroll
    for (int i = 0; i < kOutputs; ++i) acc[i] = 0.f;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      const unsigned w[4] = {v[s].x, v[s].y, v[s].z, v[s].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if constexpr (kOutputs == 4) {
          acc[i] += __uint_as_float(w[i]);
        } else {
          acc[2 * i] += DTypeOps<F16>::to_float(static_cast<unsigned short>(w[i] & 0xffffu));
          acc[2 * i + 1] += DTypeOps<F16>::to_float(static_cast<unsigned short>(w[i] >> 16));
        }
      }
    }
    unsigned packed[kOutputs / 2];
#pragma unroll
    for (int i = 0; i < kOutputs / 2; ++i) {
      packed[i] =
          DTypeOps<D>::pack2(acc[2 * i] * YOps<Y>::kUnscale, acc[2 * i + 1] * YOps<Y>::kUnscale);
    }
    if constexpr (kOutputs == 4) {
      reinterpret_cast<uint2*>(p.out)[index] = make_uint2(packed[0], packed[1]);
    } else {
      reinterpret_cast<uint4*>(p.out)[index] =
          make_uint4(packed[0], packed[1], packed[2], packed[3]);
    }
  }
};

}  // namespace rt_moe
