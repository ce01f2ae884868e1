#include "bucket.h"

#include <fmt/format.h>

#include "rt_moe/error.h"

namespace rt_moe {

Bucket bucket_for(const MoeConfig& config, std::int64_t tokens) {
  if (tokens < 1) {
    throw Error(ErrorCode::kInvalidArgument, fmt::format("bucket_for: tokens = {} < 1", tokens));
  }
  std::int64_t group_sum = tokens * config.top_k;
  std::int64_t bound = 1;
  while (bound < group_sum) bound <<= 1;
  return {bound, bound / config.top_k};
}

std::vector<Bucket> bucket_ladder(const MoeConfig& config, std::int64_t max_tokens) {
  std::vector<Bucket> ladder;
  for (std::int64_t t = 1; t <= max_tokens;) {
    Bucket b = bucket_for(config, t);
    ladder.push_back(b);
    t = b.max_tokens + 1;
  }
  return ladder;
}

}  // namespace rt_moe
