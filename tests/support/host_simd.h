// SIMD building blocks of the CPU reference (internal to tests/support): fp16/bf16 <-> fp32
// conversion written once for scalars and 16-lane vectors, row conversion, and the one fp32 dot
// product order every reference dot uses.
//
// NOTES: vectors are GCC/Clang vector extensions, whose arithmetic is element-wise IEEE: a lane
// computes exactly what scalar code computes, whatever instruction set the compiler picks. Hot
// functions are cloned for AVX2 (without FMA, so no contraction: the clones give identical bits)
// because the release preset builds for baseline x86-64 (SSE2), and GCC's -O2 vectorizer does not
// reorder fp32 reductions.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "rt_moe/config.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define RT_MOE_HOST_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define RT_MOE_HOST_CLONES
#endif

// Vector values never cross a library boundary (these functions are inlined or internal), so the
// warning that their calling convention depends on -mavx is noise.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace rt_moe::test::host {

constexpr std::int64_t kLanes = 16;
using F32x16 = float __attribute__((vector_size(64)));
using U32x16 = std::uint32_t __attribute__((vector_size(64)));
using U16x16 = std::uint16_t __attribute__((vector_size(32)));

constexpr std::int64_t padded(std::int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

template <class U>
struct FloatOf {
  using type = float;
};
template <>
struct FloatOf<U32x16> {
  using type = F32x16;
};

// fp32 bits -> fp16 bits (low 16 bits), round to nearest even. U is std::uint32_t or U32x16.
template <class U>
[[gnu::always_inline]] inline U f32_to_f16_bits(U f) {
  using F = typename FloatOf<U>::type;
  const U zero{};
  const U sign = (f >> 16) & 0x8000u;
  const U a = f & 0x7fffffffu;
  // NaN keeps its top payload bits and becomes quiet; |f| >= 65536 is Inf (65520 rounds up to Inf
  // in the normal path below).
  const U special = a > 0x7f800000u ? ((a >> 13) & 0x3ffu) | 0x7e00u : zero + 0x7c00u;
  // Below 2^-14 (half subnormals): adding 0.5f aligns the value to 2^-24 steps, and the fp32
  // adder rounds to nearest even for us.
  const U subnormal = std::bit_cast<U>(std::bit_cast<F>(a) + 0.5f) - 0x3f000000u;
  // Rebias the exponent (-112 << 23), then round the 13 dropped bits to nearest even; a carry
  // out of the mantissa correctly bumps the exponent (up to Inf).
  const U normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  U out = a < 0x38800000u ? subnormal : normal;
  out = a >= 0x47800000u ? special : out;
  return out | sign;
}

// fp16 bits (low 16 bits) -> fp32 bits; NaN stays NaN (made quiet).
template <class U>
[[gnu::always_inline]] inline U f16_to_f32_bits(U h) {
  using F = typename FloatOf<U>::type;
  const U zero{};
  const U sign = (h & 0x8000u) << 16;
  const U em = h & 0x7fffu;
  const U quiet = em > 0x7c00u ? zero + 0x00400000u : zero;
  const U special = (em << 13) | 0x7f800000u | quiet;
  // em * 2^-24 exactly: 0.5 + em * 2^-24 is representable, so the subtraction is exact.
  const U subnormal = std::bit_cast<U>(std::bit_cast<F>(em + 0x3f000000u) - 0.5f);
  const U normal = (em << 13) + 0x38000000u;
  U out = em < 0x0400u ? subnormal : normal;
  out = em >= 0x7c00u ? special : out;
  return out | sign;
}

// fp32 bits -> bf16 bits: the upper half, rounded to nearest even (overflow carries into Inf).
template <class U>
[[gnu::always_inline]] inline U f32_to_bf16_bits(U f) {
  const U rounded = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;
  return (f & 0x7fffffffu) > 0x7f800000u ? (f >> 16) | 0x0040u : rounded;
}

template <class U>
[[gnu::always_inline]] inline U bf16_to_f32_bits(U b) {
  return b << 16;
}

template <class U>
[[gnu::always_inline]] inline U to_dtype_bits(DType dtype, U f32_bits) {
  return dtype == DType::kF16 ? f32_to_f16_bits(f32_bits) : f32_to_bf16_bits(f32_bits);
}

template <class U>
[[gnu::always_inline]] inline U from_dtype_bits(DType dtype, U bits) {
  return dtype == DType::kF16 ? f16_to_f32_bits(bits) : bf16_to_f32_bits(bits);
}

[[gnu::always_inline]] inline float to_float(DType dtype, std::uint16_t bits) {
  return std::bit_cast<float>(from_dtype_bits<std::uint32_t>(dtype, bits));
}

[[gnu::always_inline]] inline std::uint16_t to_bits(DType dtype, float value) {
  return static_cast<std::uint16_t>(to_dtype_bits(dtype, std::bit_cast<std::uint32_t>(value)));
}

[[gnu::always_inline]] inline F32x16 load16(const float* p) {
  F32x16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// 16 dtype values -> 16 floats.
[[gnu::always_inline]] inline F32x16 to_float16(DType dtype, const std::uint16_t* in) {
  U16x16 bits;
  std::memcpy(&bits, in, sizeof(bits));
  const U32x16 wide = __builtin_convertvector(bits, U32x16);
  return std::bit_cast<F32x16>(dtype == DType::kF16 ? f16_to_f32_bits(wide)
                                                    : bf16_to_f32_bits(wide));
}

// 16 floats -> 16 dtype values, rounded to nearest even.
[[gnu::always_inline]] inline void to_bits16(DType dtype, F32x16 values, std::uint16_t* out) {
  const U32x16 bits = to_dtype_bits(dtype, std::bit_cast<U32x16>(values));
  const U16x16 narrow = __builtin_convertvector(bits, U16x16);
  std::memcpy(out, &narrow, sizeof(narrow));
}

// n dtype values -> n floats.
[[gnu::always_inline]] inline void to_floats(DType dtype, const std::uint16_t* in, float* out,
                                             std::int64_t n) {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const F32x16 v = to_float16(dtype, in + i);
    std::memcpy(out + i, &v, sizeof(v));
  }
  for (; i < n; ++i) out[i] = to_float(dtype, in[i]);
}

// The reference's fp32 dot order: lane l accumulates the products of indices l, l + 16, ... in
// increasing order; the 16 lanes are then summed pairwise (l + 8, then + 4, + 2, + 1).
[[gnu::always_inline]] inline float lane_sum(F32x16 v) {
  float s[kLanes];
  std::memcpy(s, &v, sizeof(s));
  for (int w = kLanes / 2; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) s[l] += s[l + w];
  }
  return s[0];
}

// out[a][b] = dot(x[a], w[b]) over n elements, n a multiple of kLanes (buffers zero-padded). Every
// (a, b) gets the order of lane_sum whatever kA and kB are, so blocking never changes a value.
template <int kA, int kB>
[[gnu::always_inline]] inline void dot_block(const float* const* x, const float* const* w,
                                             std::int64_t n, float (&out)[kA][kB]) {
  F32x16 acc[kA][kB] = {};
  for (std::int64_t i = 0; i < n; i += kLanes) {
    F32x16 vw[kB];
#pragma GCC unroll 4
    for (int b = 0; b < kB; ++b) vw[b] = load16(w[b] + i);
#pragma GCC unroll 4
    for (int a = 0; a < kA; ++a) {
      const F32x16 vx = load16(x[a] + i);
#pragma GCC unroll 4
      for (int b = 0; b < kB; ++b) acc[a][b] += vx * vw[b];
    }
  }
#pragma GCC unroll 4
  for (int a = 0; a < kA; ++a) {
#pragma GCC unroll 4
    for (int b = 0; b < kB; ++b) out[a][b] = lane_sum(acc[a][b]);
  }
}

}  // namespace rt_moe::test::host
