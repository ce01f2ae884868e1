// Ceilings that rt_moe_bench measures in the same run as the forward (REFERENCE.md section 5).
//
// ReadBandwidth: HBM read bandwidth. A grid-stride loop over 16-byte vectors; each thread keeps
// UNROLL independent loads in flight (latency x bandwidth needs many bytes in flight per SM), folds
// them into one register, and each block writes one value, so no load is dead code. The buffer must
// be far larger than L2 (the bench uses >= 2 GB) for the result to be HBM's, not L2's. EVICT_FIRST:
// the loads carry L2's evict-first policy (ld.global.L2::cache_hint), as the decode GEMMs' weight
// loads do; the bench takes the faster of the two as the ceiling.
//
// FillBits: random words (a hash of the index and a seed, and-ed with a mask) for the read's
// buffer. The weights a forward reads are random bits; a read of a constant buffer draws about
// a third less power for the same bytes (docs/PERF.md 47b), which on a power-capped board is a
// clock that a read of weights does not get.
#pragma once

#include "common.cuh"

namespace rt_moe {

// The block's threads' values summed into block_sums[blockIdx.x], so that no load is dead code.
template <int THREADS>
__device__ __forceinline__ void block_sum(unsigned acc, unsigned* block_sums) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  __shared__ unsigned warp_sums[THREADS / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned total = 0;
    for (int w = 0; w < THREADS / 32; ++w) total += warp_sums[w];
    block_sums[blockIdx.x] = total;
  }
}

template <int THREADS, int UNROLL, bool EVICT_FIRST>
struct ReadBandwidth {
  static constexpr int kThreads = THREADS;
  static constexpr int kSmemBytes = 0;
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 1024 threads a block");
  static_assert(UNROLL >= 1, "at least one load in flight");

  static __device__ __forceinline__ Vec8 load(const Vec8* p, unsigned long long policy) {
    if (!EVICT_FIRST) return *p;
    Vec8 v;
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
                 : "l"(p), "l"(policy));
    return v;
  }

  static __device__ void run(const ReadParams& p) {
    const Vec8* __restrict__ data = reinterpret_cast<const Vec8*>(p.data);
    const unsigned long long policy = EVICT_FIRST ? l2_evict_first_policy() : 0;
    const long long stride = (long long)gridDim.x * THREADS;
    long long i = (long long)blockIdx.x * THREADS + threadIdx.x;
    unsigned acc = 0;
    for (; i + (UNROLL - 1) * stride < p.vectors; i += UNROLL * stride) {
      Vec8 v[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) v[u] = load(data + i + u * stride, policy);
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) acc += v[u].w[0] ^ v[u].w[1] ^ v[u].w[2] ^ v[u].w[3];
    }
    for (; i < p.vectors; i += stride) {
      const Vec8 v = load(data + i, policy);
      acc += v.w[0] ^ v.w[1] ^ v.w[2] ^ v.w[3];
    }
    block_sum<THREADS>(acc, p.block_sums);
  }
};

// RingRead: the same read as the decode GEMMs stream their weights, by cp.async into a ring of
// STAGES stages of STAGE_BYTES a block (the fused decode tile: 8 of 8 KiB), each block taking
// contiguous stages grid-stride; each thread folds one 16-byte word a stage from shared memory.
// On H100s it read 1.0-1.5% faster than ReadBandwidth's variants (docs/PERF.md 47b, 47f), so it
// is one of the ceiling's variants.
template <int THREADS, int STAGES, int STAGE_BYTES>
struct RingRead {
  static constexpr int kThreads = THREADS;
  static constexpr int kSmemBytes = STAGES * STAGE_BYTES;
  static constexpr int kCopies = STAGE_BYTES / 16 / THREADS;  // a thread's copies a stage
  static_assert(STAGE_BYTES % (16 * THREADS) == 0, "whole 16-byte copies a thread a stage");
  static_assert(STAGES >= 2, "a ring of at least two stages");

  static __device__ void run(const ReadParams& p) {
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned base = smem_address(smem);
    const char* data = static_cast<const char*>(p.data);
    const long long stages = p.vectors * 16 / STAGE_BYTES;  // whole stages; the rest below
    const long long mine = stages > blockIdx.x ? (stages - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    auto issue = [&](long long i) {
      if (i < mine) {
        const char* src = data + (blockIdx.x + i * gridDim.x) * STAGE_BYTES;
        const unsigned dst = base + int(i % STAGES) * STAGE_BYTES;
#pragma unroll
        for (int c = 0; c < kCopies; ++c) {
          const int offset = (c * THREADS + threadIdx.x) * 16;
          cp_async_16(dst + offset, src + offset, true);
        }
      }
      cp_async_commit();
    };
    for (int s = 0; s < STAGES - 1; ++s) issue(s);
    unsigned acc = 0;
    for (long long i = 0; i < mine; ++i) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // stage i landed for every thread; stage i - 1 is free
      issue(i + STAGES - 1);
      const uint4 v =
          *reinterpret_cast<const uint4*>(smem + int(i % STAGES) * STAGE_BYTES + threadIdx.x * 16);
      acc += v.x ^ v.y ^ v.z ^ v.w;
    }
    cp_async_wait<0>();
    const Vec8* rest = reinterpret_cast<const Vec8*>(p.data);
    for (long long v = stages * (STAGE_BYTES / 16) + (long long)blockIdx.x * THREADS + threadIdx.x;
         v < p.vectors; v += (long long)gridDim.x * THREADS) {
      const Vec8 w = rest[v];
      acc += w.w[0] ^ w.w[1] ^ w.w[2] ^ w.w[3];
    }
    block_sum<THREADS>(acc, p.block_sums);
  }
};

template <int THREADS>
struct FillBits {
  static constexpr int kThreads = THREADS;
  static constexpr int kSmemBytes = 0;

  static __device__ void run(const FillParams& p) {
    for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < p.words;
         i += (long long)gridDim.x * THREADS) {
      unsigned h = unsigned(i) * 0x9e3779b9u ^ unsigned(i >> 32) * 0x85ebca6bu ^ p.seed;
      h ^= h >> 15;
      h *= 0x2c1b3c6du;
      h ^= h >> 12;
      h *= 0x297a2d39u;
      h ^= h >> 15;
      p.data[i] = h & p.mask;
    }
  }
};

}  // namespace rt_moe
