// fp16/bf16 conversion and the counter-based random data of the CPU reference (reference.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "host_parallel.h"
#include "host_simd.h"
#include "reference.h"

namespace rt_moe::test {
namespace {

using host::F32x8;
using host::U32x8;
using U64x8 = std::uint64_t __attribute__((vector_size(64)));
using I32x8 = std::int32_t __attribute__((vector_size(32)));

constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ull;

// The splitmix64 finalizer, for scalars and vectors.
template <class U>
[[gnu::always_inline]] inline U mix64(const U& in) {
  U z = (in ^ (in >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// ln(u) for u in (0, 1): u = 2^e * m with m in [sqrt(1/2), sqrt(2)), ln(m) = 2 atanh(s) with
// s = (m - 1) / (m + 1), |s| < 0.172, so the series to s^9 is below fp32 resolution.
[[gnu::always_inline]] inline F32x8 log8(const F32x8& u) {
  const U32x8 bits = host::bit_cast<U32x8>(u);
  F32x8 m = host::bit_cast<F32x8>((bits & 0x007fffffu) | 0x3f800000u);
  I32x8 e = host::bit_cast<I32x8>(bits >> 23) - 127;
  const I32x8 big = m > 1.41421356f;  // -1 where true
  m = big ? m * 0.5f : m;
  e -= big;
  const F32x8 s = (m - 1.0f) / (m + 1.0f);
  const F32x8 s2 = s * s;
  const F32x8 odd = s2 * (1 / 3.0f + s2 * (1 / 5.0f + s2 * (1 / 7.0f + s2 * (1 / 9.0f))));
  return __builtin_convertvector(e, F32x8) * 0.693147182f + 2.0f * (s + s * odd);
}

// Box-Muller on 8 pairs [pair0, pair0 + 8): one 64-bit hash per pair gives u1 (23 bits) and
// u2 (24 bits), and the pair gives two normals, r cos(2 pi u2) and r sin(2 pi u2), stored at
// 2 * pair and 2 * pair + 1: values [2 * pair0, 2 * pair0 + 16) in `lo` and `hi`.
[[gnu::always_inline]] inline void normals16(std::uint64_t key, std::int64_t pair0, F32x8& lo,
                                             F32x8& hi) {
  const U64x8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
  const U64x8 z = mix64(key + (lane + static_cast<std::uint64_t>(pair0) + 1) * kGolden);
  const I32x8 bits1 = __builtin_convertvector(z >> 41, I32x8);
  const I32x8 bits2 = __builtin_convertvector((z >> 8) & 0xffffffu, I32x8);

  // r = sqrt(-2 ln u1) with u1 in (0, 1), so r in (0, 5.8]; sqrt as a * rsqrt(a) with three
  // Newton steps from the classic bit-trick estimate (relative error < 1e-7).
  const F32x8 u1 = (__builtin_convertvector(bits1, F32x8) + 0.5f) * 0x1p-23f;
  const F32x8 a = -2.0f * log8(u1);
  F32x8 y = host::bit_cast<F32x8>(0x5f3759dfu - (host::bit_cast<U32x8>(a) >> 1));
  for (int step = 0; step < 3; ++step) y = y * (1.5f - 0.5f * a * y * y);
  const F32x8 r = a * y;

  // 2 pi u2 = (quadrant + f) pi / 2 with f in [-1/2, 1/2]: Taylor series on [-pi/4, pi/4].
  const F32x8 q = __builtin_convertvector(bits2, F32x8) * 0x1p-22f;  // [0, 4)
  const I32x8 quadrant = __builtin_convertvector(q + 0.5f, I32x8);
  const F32x8 f = (q - __builtin_convertvector(quadrant, F32x8)) * 1.57079633f;
  const F32x8 f2 = f * f;
  const F32x8 sin_f =
      f * (1.0f + f2 * (-1 / 6.0f + f2 * (1 / 120.0f + f2 * (-1 / 5040.0f + f2 / 362880.0f))));
  const F32x8 cos_f = 1.0f + f2 * (-0.5f + f2 * (1 / 24.0f + f2 * (-1 / 720.0f + f2 / 40320.0f)));
  const I32x8 k = quadrant & 3;
  const F32x8 c = k == 0 ? cos_f : k == 1 ? -sin_f : k == 2 ? -cos_f : sin_f;
  const F32x8 s = k == 0 ? sin_f : k == 1 ? cos_f : k == 2 ? -sin_f : -cos_f;
  const F32x8 rc = r * c, rs = r * s;
  lo = __builtin_shufflevector(rc, rs, 0, 8, 1, 9, 2, 10, 3, 11);
  hi = __builtin_shufflevector(rc, rs, 4, 12, 5, 13, 6, 14, 7, 15);
}

constexpr std::int64_t kPairsPerBlock = 8;

RT_MOE_HOST_CLONES void fill_pairs(std::uint16_t* out, std::int64_t n, DType dtype, float scale,
                                   std::uint64_t key, std::int64_t begin, std::int64_t end) {
  for (std::int64_t pair = begin; pair < end; pair += kPairsPerBlock) {
    F32x8 lo, hi;
    normals16(key, pair, lo, hi);
    const std::int64_t first = 2 * pair;
    if (first + 16 <= n) {
      host::to_bits8(dtype, lo * scale, out + first);
      host::to_bits8(dtype, hi * scale, out + first + 8);
    } else {
      std::uint16_t tail[16];
      host::to_bits8(dtype, lo * scale, tail);
      host::to_bits8(dtype, hi * scale, tail + 8);
      std::memcpy(out + first, tail, (n - first) * sizeof(std::uint16_t));
    }
  }
}

// N(0, 1) * scale in fp32, from the same generator as fill_random (single-threaded: for small
// tensors).
std::vector<float> random_floats(std::int64_t count, float scale, std::uint64_t seed) {
  std::vector<float> out(count);
  const std::uint64_t key = mix64(seed + kGolden);
  for (std::int64_t first = 0; first < count; first += 2 * kPairsPerBlock) {
    F32x8 lo, hi;
    normals16(key, first / 2, lo, hi);
    for (std::int64_t j = 0; j < 16 && first + j < count; ++j) {
      out[first + j] = (j < 8 ? lo[j] : hi[j - 8]) * scale;
    }
  }
  return out;
}

// A seed per tensor: tensors never share a stream.
std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t tensor) {
  return mix64(seed + (tensor + 1) * kGolden);
}

std::vector<std::uint16_t> random_tensor(DType dtype, std::int64_t count, float scale,
                                         std::uint64_t seed) {
  std::vector<std::uint16_t> out(count);
  fill_random(out, dtype, scale, seed);
  return out;
}

}  // namespace

std::uint16_t float_to_bits(DType dtype, float value) { return host::to_bits(dtype, value); }

float bits_to_float(DType dtype, std::uint16_t bits) { return host::to_float(dtype, bits); }

void fill_random(std::span<std::uint16_t> out, DType dtype, float scale, std::uint64_t seed) {
  const auto n = static_cast<std::int64_t>(out.size());
  const std::uint64_t key = mix64(seed + kGolden);
  host::parallel_ranges((n + 1) / 2, kPairsPerBlock, [&](std::int64_t begin, std::int64_t end) {
    fill_pairs(out.data(), n, dtype, scale, key, begin, end);
  });
}

HostWeights random_weights(const MoeConfig& config, std::uint64_t seed) {
  config.validate();
  const std::int64_t h = config.d_hidden, i = config.d_expert, e = config.n_routed_experts;
  const std::int64_t si = config.n_shared_experts * i;
  const DType dt = config.dtype;
  const auto inv_sqrt = [](std::int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
  HostWeights w;
  w.router = random_tensor(dt, e * h, inv_sqrt(h), derive_seed(seed, 0));
  w.gate = random_tensor(dt, e * i * h, inv_sqrt(i), derive_seed(seed, 1));
  w.up = random_tensor(dt, e * i * h, inv_sqrt(i), derive_seed(seed, 2));
  w.down = random_tensor(dt, e * h * i, inv_sqrt(h), derive_seed(seed, 3));
  if (si > 0) {
    w.shared_gate = random_tensor(dt, si * h, inv_sqrt(si), derive_seed(seed, 4));
    w.shared_up = random_tensor(dt, si * h, inv_sqrt(si), derive_seed(seed, 5));
    w.shared_down = random_tensor(dt, h * si, inv_sqrt(h), derive_seed(seed, 6));
  }
  w.router_bias = random_floats(e, 0.01f, derive_seed(seed, 8));  // 7: activations
  return w;
}

std::vector<std::uint16_t> random_activations(const MoeConfig& config, std::int64_t tokens,
                                              std::uint64_t seed) {
  config.validate();
  return random_tensor(config.dtype, tokens * config.d_hidden, 1.0f, derive_seed(seed, 7));
}

namespace {

// Balanced routing gives each routed expert its own element of x.
void require_element_per_expert(const MoeConfig& config) {
  if (config.d_hidden < config.n_routed_experts) {
    throw std::invalid_argument("balanced routing needs d_hidden >= n_routed_experts");
  }
}

}  // namespace

void balance_router(const MoeConfig& config, HostWeights& weights) {
  require_element_per_expert(config);
  const std::int64_t E = config.n_routed_experts, H = config.d_hidden;
  const std::uint16_t zero = float_to_bits(config.dtype, 0.f),
                      one = float_to_bits(config.dtype, 1.f);
  std::fill(weights.router.begin(), weights.router.end(), zero);
  for (std::int64_t e = 0; e < E; ++e) weights.router[std::size_t(e * H + e)] = one;
}

void balance_activations(const MoeConfig& config, std::span<std::uint16_t> x, std::int64_t tokens) {
  require_element_per_expert(config);
  const std::int64_t E = config.n_routed_experts, H = config.d_hidden, k = config.top_k;
  const std::uint16_t high = float_to_bits(config.dtype, 2.f),
                      low = float_to_bits(config.dtype, -2.f);
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::uint16_t* row = x.data() + t * H;
    std::fill(row, row + E, low);
    for (std::int64_t j = 0; j < k; ++j) row[(t * k + j) % E] = high;
  }
}

}  // namespace rt_moe::test
