// Buckets: a forward with T tokens runs the kernels of the bucket whose group_sum bound
// (T * top_k rounded up to a power of two) covers it, so a server meets O(log T) variants, not
// one per batch size. A bucket fixes the tile choice and bounds the workspace.
#pragma once

#include <cstdint>
#include <vector>

#include "rt_moe/config.h"

namespace rt_moe {

struct Bucket {
  std::int64_t group_sum_max = 0;  // power of two >= T * k
  std::int64_t max_tokens = 0;     // group_sum_max / k: the most tokens this bucket serves
  friend bool operator==(const Bucket&, const Bucket&) = default;
};

Bucket bucket_for(const MoeConfig& config, std::int64_t tokens);  // tokens >= 1

// The buckets a server with up to `max_tokens` tokens per forward meets, smallest first.
std::vector<Bucket> bucket_ladder(const MoeConfig& config, std::int64_t max_tokens);

}  // namespace rt_moe
