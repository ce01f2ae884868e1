// For the offline experiments of this directory (no GPU): the routed pairs of each expert at T
// tokens for rt_moe_bench's inputs (its weight seed 20240601 for the router and bias, x seeded
// 1000 + T), by the reference routing (tests/support/reference.h).
#pragma once

#include <vector>

#include "reference.h"
#include "rt_moe/presets.h"

inline std::vector<long long> bench_expert_counts(const rt_moe::MoeConfig& c, long long T) {
  rt_moe::MoeConfig small = c;
  small.d_expert = 64;  // the router and bias do not depend on I
  const rt_moe::test::HostWeights w = rt_moe::test::random_weights(small, 20240601);
  const std::vector<std::uint16_t> x = rt_moe::test::random_activations(c, T, 1000 + T);
  const rt_moe::test::Routing r = rt_moe::test::reference_routing(c, x, w.router, T, w.router_bias);
  std::vector<long long> counts(c.n_routed_experts, 0);
  for (long long i = 0; i < T * c.top_k; ++i) counts[r.ids[i]]++;
  return counts;
}
