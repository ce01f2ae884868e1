// One-token routing problems for the reference's own tests (test_reference.cpp,
// test_routing_variants.cpp): a tiny config, x = (1, 0, ..., 0) and a router that gives chosen
// logits for it, and the scores those logits should give, computed by hand.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "reference.h"

namespace rt_moe::test {

inline constexpr DType kDTypes[] = {DType::kF16, DType::kBF16};

inline MoeConfig tiny_config(std::int64_t e, std::int64_t k, DType dtype = DType::kBF16) {
  return MoeConfig{.d_hidden = 8, .d_expert = 8, .n_routed_experts = e, .top_k = k, .dtype = dtype};
}

inline std::vector<std::uint16_t> to_bits(DType dtype, const std::vector<float>& values) {
  std::vector<std::uint16_t> out;
  for (const float v : values) out.push_back(float_to_bits(dtype, v));
  return out;
}

// The router whose logits for x = (1, 0, ..., 0) are `logits` (exact in either dtype).
inline std::vector<std::uint16_t> router_for(const MoeConfig& c, const std::vector<float>& logits) {
  std::vector<float> router(c.n_routed_experts * c.d_hidden, 0.0f);
  for (std::size_t e = 0; e < logits.size(); ++e) router[e * c.d_hidden] = logits[e];
  return to_bits(c.dtype, router);
}

inline std::vector<std::uint16_t> unit_x(const MoeConfig& c) {
  std::vector<float> x(c.d_hidden, 0.0f);
  x[0] = 1.0f;
  return to_bits(c.dtype, x);
}

// Softmax in fp64 over the given logits, rounded to the dtype.
inline std::vector<float> softmax_by_hand(DType dtype, const std::vector<double>& logits) {
  double sum = 0;
  for (const double l : logits) sum += std::exp(l);
  std::vector<float> probs;
  for (const double l : logits) probs.push_back(round_to(dtype, std::exp(l) / sum));
  return probs;
}

inline bool within_one_ulp(DType dtype, float a, float b) {
  const int ia = float_to_bits(dtype, a), ib = float_to_bits(dtype, b);
  return std::signbit(a) == std::signbit(b) && std::abs(ia - ib) <= 1;
}

}  // namespace rt_moe::test
