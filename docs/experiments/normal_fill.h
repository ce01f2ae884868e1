// N(0, 1) x scale values rounded to bf16 or fp16, as the bench's weights are drawn (data_energy.cu,
// power_roofline.cu): Box-Muller on two 32-bit hashes of the value's index.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ unsigned hash32(unsigned long long i, unsigned seed) {
  unsigned h = unsigned(i) * 0x9e3779b9u ^ unsigned(i >> 32) * 0x85ebca6bu ^ seed;
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return h;
}

// Word i: two N(0, 1) x scale values (u in (0, 1]), rounded to bf16 (BF16) or fp16.
template <bool BF16>
__global__ void fill_normal(unsigned* p, long long words, float scale, unsigned seed) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < words;
       i += (long long)gridDim.x * blockDim.x) {
    const float u1 = (hash32(2 * i, seed) + 0.5f) * 0x1p-32f;
    const float u2 = (hash32(2 * i + 1, seed) + 0.5f) * 0x1p-32f;
    const float r = sqrtf(-2.0f * logf(u1)) * scale;
    float s, c;
    sincospif(2.0f * u2, &s, &c);
    unsigned short lo, hi;
    if constexpr (BF16) {
      lo = __bfloat16_as_ushort(__float2bfloat16_rn(r * c));
      hi = __bfloat16_as_ushort(__float2bfloat16_rn(r * s));
    } else {
      lo = __half_as_ushort(__float2half_rn(r * c));
      hi = __half_as_ushort(__float2half_rn(r * s));
    }
    p[i] = unsigned(lo) | unsigned(hi) << 16;
  }
}
