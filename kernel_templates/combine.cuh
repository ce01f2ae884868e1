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
    float acc[kOutputs] = {};
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      float f[kOutputs];
      if constexpr (kOutputs == 4) {
        f[0] = __uint_as_float(v[s].x), f[1] = __uint_as_float(v[s].y);
        f[2] = __uint_as_float(v[s].z), f[3] = __uint_as_float(v[s].w);
      } else {
        unpack8<F16>(Vec8{{v[s].x, v[s].y, v[s].z, v[s].w}}, f);
      }
#pragma unroll
      for (int i = 0; i < kOutputs; ++i) acc[i] += f[i];
    }
#pragma unroll
    for (int i = 0; i < kOutputs; ++i) acc[i] *= YOps<Y>::kUnscale;
    if constexpr (kOutputs == 4) {
      reinterpret_cast<uint2*>(p.out)[index] =
          make_uint2(DTypeOps<D>::pack2(acc[0], acc[1]), DTypeOps<D>::pack2(acc[2], acc[3]));
    } else {
      reinterpret_cast<Vec8*>(p.out)[index] = pack8<D>(acc);
    }
  }
};

}  // namespace rt_moe
