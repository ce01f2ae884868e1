// The fused decode tile's ring and its work on one stage (16x64x64 w1x4: grouped_gemm_sm80.cuh's
// 16-row tile), for the stream microbenchmarks of this directory (stripe_energy.cu,
// block_rate.cu): the cp.async ring's loop as the tile runs it; 4 K steps of ldmatrix.x4 of the x
// tile and of the warp's 16 weight rows, and 2 mma.sync m16n8k16 a step; and the accumulators
// folded into the sink, so that none is dead code. Build with -Ikernel_templates.
#pragma once

#include "read_sink.h"
#include "tile_loader.cuh"  // the kernels' swizzle, cp.async, ldmatrix and mma.sync wrappers

// `steps` stages through a ring of STAGES: load(s) issues stage s's copies, use(s) runs in every
// thread once stage s has landed; STAGES - 1 stages in flight, as the tile keeps them.
template <int STAGES, typename Load, typename Use>
__device__ __forceinline__ void decode_ring(int steps, Load load, Use use) {
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    load(s);
    rt_moe::cp_async_commit();
  }
  for (int s = 0; s < steps; ++s) {
    rt_moe::cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (s + STAGES - 1 < steps) load(s + STAGES - 1);
    rt_moe::cp_async_commit();
    use(s);
  }
  rt_moe::cp_async_wait<0>();
  __syncthreads();
}

__device__ __forceinline__ void decode_stage_mma(float (&acc)[2][4], unsigned a_st, unsigned b_st,
                                                 int lane, int warp) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    unsigned a[4], b[4];
    rt_moe::ldmatrix_x4(a, a_st + rt_moe::swizzle_128b(lane % 16, ks * 2 + lane / 16));
    const int row = warp * 16 + (lane / 16) * 8 + lane % 8;
    rt_moe::ldmatrix_x4(b, b_st + rt_moe::swizzle_128b(row, ks * 2 + (lane / 8) % 2));
    rt_moe::DTypeOps<rt_moe::BF16>::mma(acc[0], a, {b[0], b[1]});
    rt_moe::DTypeOps<rt_moe::BF16>::mma(acc[1], a, {b[2], b[3]});
  }
}

__device__ __forceinline__ void decode_stage_sink(const float (&acc)[2][4], int4* out) {
  int4 v{__float_as_int(acc[0][0] + acc[1][1]), __float_as_int(acc[0][2]),
         __float_as_int(acc[1][0]), __float_as_int(acc[1][3])};
  sink(v, out);
}
