// The shape and semantics of one MoE layer (../shared/REFERENCE.md sections 1 and 4).
#pragma once

#include <cstdint>
#include <string>

namespace rt_moe {

enum class DType { kF16, kBF16 };

const char* to_string(DType dtype);      // "fp16", "bf16"
DType parse_dtype(const std::string& s);  // "fp16"|"f16"|"half", "bf16"|"bfloat16"; throws Error

// Routing knobs. The defaults are the reference's: softmax over all experts, plain top-k (ties
// toward the lower expert index), no renormalisation, no scaling.
struct RoutingConfig {
  enum class Score { kSoftmax, kSigmoid };
  Score score = Score::kSoftmax;
  bool renormalize = false;
  float routed_scaling_factor = 1.0f;
};

struct MoeConfig {
  std::int64_t d_hidden = 0;          // H
  std::int64_t d_expert = 0;          // I
  std::int64_t n_routed_experts = 0;  // E
  std::int64_t n_shared_experts = 0;  // S (0 = none); one dense expert of width S * I
  std::int64_t top_k = 0;             // k
  DType dtype = DType::kBF16;
  RoutingConfig routing;

  // Throws Error(kInvalidArgument) naming the first bad field and its value.
  void validate() const;
  std::string describe() const;  // "H=7168 I=2048 E=256 S=1 k=8 bf16"
};

// Element size of the activation and weight dtype, in bytes.
constexpr std::int64_t dtype_bytes(DType) { return 2; }

}  // namespace rt_moe
