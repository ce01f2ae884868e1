// SIMD building blocks of the CPU reference (internal to tests/support): fp16/bf16 <-> fp32
// conversion written once for scalars and 8-lane vectors, row conversion, and the one fp32 dot
// product order every reference dot uses.
//
// NOTES: vectors are GCC/Clang vector extensions, whose arithmetic is element-wise IEEE: a lane
// computes exactly what scalar code computes, whatever instruction set the compiler picks. Hot
// functions are cloned for AVX2 (without FMA, so no contraction: the clones give identical bits)
// because the build targets baseline x86-64 (SSE2), and no compiler vectorizes an fp32 reduction
// by itself without -ffast-math (which would reorder it).
#pragma once

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

// Dot products run on 16 lanes (kLanes) held as two 8-wide vectors: GCC keeps 8-wide vectors in
// AVX2 registers, while 16-wide generic vectors live on the stack on that target (the forward
// ran 3x slower).
constexpr std::int64_t kLanes = 16;
using F32x8 = float __attribute__((vector_size(32)));
using U32x8 = std::uint32_t __attribute__((vector_size(32)));
using U16x8 = std::uint16_t __attribute__((vector_size(16)));

constexpr std::int64_t padded(std::int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// std::bit_cast for scalars and vectors. (GCC 12's UBSan reports a null load inside std::bit_cast
// of vector types; memcpy compiles to the same register move.)
template <class To, class From>
[[gnu::always_inline]] inline To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof(to));
  return to;
}

template <class U>
struct FloatOf {
  using type = float;
};
template <>
struct FloatOf<U32x8> {
  using type = F32x8;
};

// fp32 bits -> fp16 bits (low 16 bits), round to nearest even. U is std::uint32_t or U32x8.
template <class U>
[[gnu::always_inline]] inline U f32_to_f16_bits(const U& f) {
  using F = typename FloatOf<U>::type;
  const U zero{};
  const U sign = (f >> 16) & 0x8000u;
  const U a = f & 0x7fffffffu;
  // NaN keeps its top payload bits and becomes quiet; |f| >= 65536 is Inf (65520 rounds up to Inf
  // in the normal path below).
  const U special = a > 0x7f800000u ? ((a >> 13) & 0x3ffu) | 0x7e00u : zero + 0x7c00u;
  // Below 2^-14 (half subnormals): adding 0.5f aligns the value to 2^-24 steps, and the fp32
  // adder rounds to nearest even for us.
  const U subnormal = bit_cast<U>(bit_cast<F>(a) + 0.5f) - 0x3f000000u;
  // Rebias the exponent (-112 << 23), then round the 13 dropped bits to nearest even; a carry
  // out of the mantissa correctly bumps the exponent (up to Inf).
  const U normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  U out = a < 0x38800000u ? subnormal : normal;
  out = a >= 0x47800000u ? special : out;
  return out | sign;
}

// fp16 bits (low 16 bits) -> fp32 bits; NaN stays NaN (made quiet).
template <class U>
[[gnu::always_inline]] inline U f16_to_f32_bits(const U& h) {
  using F = typename FloatOf<U>::type;
  const U zero{};
  const U sign = (h & 0x8000u) << 16;
  const U em = h & 0x7fffu;
  const U quiet = em > 0x7c00u ? zero + 0x00400000u : zero;
  const U special = (em << 13) | 0x7f800000u | quiet;
  // em * 2^-24 exactly: 0.5 + em * 2^-24 is representable, so the subtraction is exact.
  const U subnormal = bit_cast<U>(bit_cast<F>(em + 0x3f000000u) - 0.5f);
  const U normal = (em << 13) + 0x38000000u;
  U out = em < 0x0400u ? subnormal : normal;
  out = em >= 0x7c00u ? special : out;
  return out | sign;
}

// fp32 bits -> bf16 bits: the upper half, rounded to nearest even (overflow carries into Inf).
template <class U>
[[gnu::always_inline]] inline U f32_to_bf16_bits(const U& f) {
  const U rounded = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;
  return (f & 0x7fffffffu) > 0x7f800000u ? (f >> 16) | 0x0040u : rounded;
}

template <class U>
[[gnu::always_inline]] inline U bf16_to_f32_bits(const U& b) {
  return b << 16;
}

template <class U>
[[gnu::always_inline]] inline U to_dtype_bits(DType dtype, const U& f32_bits) {
  return dtype == DType::kF16 ? f32_to_f16_bits(f32_bits) : f32_to_bf16_bits(f32_bits);
}

template <class U>
[[gnu::always_inline]] inline U from_dtype_bits(DType dtype, const U& bits) {
  return dtype == DType::kF16 ? f16_to_f32_bits(bits) : bf16_to_f32_bits(bits);
}

[[gnu::always_inline]] inline float to_float(DType dtype, std::uint16_t bits) {
  return bit_cast<float>(from_dtype_bits<std::uint32_t>(dtype, bits));
}

[[gnu::always_inline]] inline std::uint16_t to_bits(DType dtype, float value) {
  return static_cast<std::uint16_t>(to_dtype_bits(dtype, bit_cast<std::uint32_t>(value)));
}

[[gnu::always_inline]] inline F32x8 load8(const float* p) {
  F32x8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// 8 dtype values -> 8 floats.
[[gnu::always_inline]] inline F32x8 to_float8(DType dtype, const std::uint16_t* in) {
  U16x8 bits;
  std::memcpy(&bits, in, sizeof(bits));
  const U32x8 wide = __builtin_convertvector(bits, U32x8);
  return bit_cast<F32x8>(from_dtype_bits(dtype, wide));
}

// 8 floats -> 8 dtype values, rounded to nearest even.
[[gnu::always_inline]] inline void to_bits8(DType dtype, const F32x8& values, std::uint16_t* out) {
  const U32x8 bits = to_dtype_bits(dtype, bit_cast<U32x8>(values));
  const U16x8 narrow = __builtin_convertvector(bits, U16x8);
  std::memcpy(out, &narrow, sizeof(narrow));
}

// n dtype values -> n floats.
[[gnu::always_inline]] inline void to_floats(DType dtype, const std::uint16_t* in, float* out,
                                             std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const F32x8 v = to_float8(dtype, in + i);
    std::memcpy(out + i, &v, sizeof(v));
  }
  for (; i < n; ++i) out[i] = to_float(dtype, in[i]);
}

// The reference's fp32 dot order: lane l of 16 accumulates the products of indices l, l + 16, ...
// in increasing order; the 16 lanes are then summed pairwise (l + 8, then + 4, + 2, + 1). `lo`
// holds lanes 0..7, `hi` lanes 8..15.
[[gnu::always_inline]] inline float lane_sum(const F32x8& lo, const F32x8& hi) {
  const F32x8 v = lo + hi;
  float s[8];
  std::memcpy(s, &v, sizeof(s));
  for (int w = 4; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) s[l] += s[l + w];
  }
  return s[0];
}

// out[a][b] = dot(x[a], w[b]) over n elements, n a multiple of kLanes (buffers zero-padded). Every
// (a, b) gets the order of lane_sum whatever kA and kB are, so blocking never changes a value.
template <int kA, int kB>
[[gnu::always_inline]] inline void dot_block(const float* const* x, const float* const* w,
                                             std::int64_t n, float (&out)[kA][kB]) {
  F32x8 lo[kA][kB] = {}, hi[kA][kB] = {};
  for (std::int64_t i = 0; i < n; i += kLanes) {
    F32x8 w_lo[kB], w_hi[kB];
#pragma GCC unroll 4
    for (int b = 0; b < kB; ++b) {
      w_lo[b] = load8(w[b] + i);
      w_hi[b] = load8(w[b] + i + 8);
    }
#pragma GCC unroll 4
    for (int a = 0; a < kA; ++a) {
      const F32x8 x_lo = load8(x[a] + i), x_hi = load8(x[a] + i + 8);
#pragma GCC unroll 4
      for (int b = 0; b < kB; ++b) {
        lo[a][b] += x_lo * w_lo[b];
        hi[a][b] += x_hi * w_hi[b];
      }
    }
  }
#pragma GCC unroll 4
  for (int a = 0; a < kA; ++a) {
#pragma GCC unroll 4
    for (int b = 0; b < kB; ++b) out[a][b] = lane_sum(lo[a][b], hi[a][b]);
  }
}

}  // namespace rt_moe::test::host
