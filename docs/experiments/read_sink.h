// Device helpers of the read microbenchmarks (l2_fabric.cu, dram_stripes.cu, energy_costs.cu,
// stripe_energy.cu): fold what a thread reads into one value, and a store that never happens in
// practice but keeps the loads alive; the two L2-resident read patterns that l2_fabric.cu and
// energy_costs.cu share; and the linear DRAM read of energy_costs.cu and stripe_energy.cu.
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

// Every block reads all of one buffer of `n` 16-byte elements (a power of two), each from its own
// start, `reps` times: L2 hits once warm, served from each reader's own L2 partition.
__global__ void shared_read(const int4* p, size_t n, int reps, int4* out) {
  int4 acc{0, 0, 0, 0};
  const size_t start = (size_t)blockIdx.x * (n / gridDim.x);
  for (int r = 0; r < reps; ++r)
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
      fold(acc, __ldcg(p + ((start + i) & (n - 1))));
  sink(acc, out);
}

// Every block reads its own slice of `n_per` 16-byte elements, `reps` times.
__global__ void private_read(const int4* p, size_t n_per, int reps, int4* out) {
  int4 acc{0, 0, 0, 0};
  const int4* mine = p + blockIdx.x * n_per;
  for (int r = 0; r < reps; ++r)
    for (size_t i = threadIdx.x; i < n_per; i += blockDim.x) fold(acc, __ldcg(mine + i));
  sink(acc, out);
}

// A buffer of `n` 16-byte elements read once in address order, 4 loads in flight a thread (the HBM
// ceiling's pattern).
__global__ void dram_read(const int4* p, size_t n, int4* out) {
  int4 acc{0, 0, 0, 0};
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const int4 v0 = __ldcg(p + i), v1 = __ldcg(p + i + stride), v2 = __ldcg(p + i + 2 * stride),
               v3 = __ldcg(p + i + 3 * stride);
    fold(acc, v0);
    fold(acc, v1);
    fold(acc, v2);
    fold(acc, v3);
  }
  for (; i < n; i += stride) fold(acc, __ldcg(p + i));
  sink(acc, out);
}
