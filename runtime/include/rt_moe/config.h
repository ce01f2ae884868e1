// The shape and semantics of one MoE layer (../shared/REFERENCE.md sections 1 and 4).
#pragma once

#include <cstdint>
#include <string>

namespace rt_moe {

enum class DType { kF16, kBF16 };

const char* to_string(DType dtype);       // "fp16", "bf16"
DType parse_dtype(const std::string& s);  // "fp16"|"f16"|"half", "bf16"|"bfloat16"; throws Error

// Routing knobs (REFERENCE.md section 4). The defaults are the reference's: softmax over all
// experts, plain top-k (ties toward the lower expert index), no renormalisation, no scaling, logits
// rounded to the activation dtype. Per token:
//   logits l (fp32 dot products; rounded to the dtype unless logits_fp32);
//   scores s = dtype(softmax(l)) over all E, or s = dtype(sigmoid(l));
//   selection values v = s + router_bias (fp32) when correction_bias, else s;
//   n_group > 1: experts form n_group groups of E / n_group consecutive experts; a group scores the
//     max of its v (kMax) or the sum of its two largest v (kSumTop2); only the experts of the
//     topk_group best groups (ties toward the lower group index) can be chosen;
//   top-k by v (ties toward the lower expert index);
//   weights = the chosen experts' s (never the biased v), divided by their fp32 sum when
//     renormalize, times routed_scaling_factor, rounded to the dtype.
// Models: DeepSeek-V3 = sigmoid, correction_bias, 8 groups keep 4 by kSumTop2, renormalize, 2.5;
// DeepSeek-V2 = softmax, 8 groups keep 3 by kMax, 16; Qwen3-MoE and Mixtral = softmax,
// logits_fp32, renormalize.
struct RoutingConfig {
  enum class Score { kSoftmax, kSigmoid };
  enum class GroupScore { kMax, kSumTop2 };
  Score score = Score::kSoftmax;
  bool correction_bias = false;  // MoeWeights::router_bias (fp32 [E]) biases the selection only
  int n_group = 1;               // 1: no group-limited selection
  int topk_group = 1;            // groups kept, in [1, n_group]
  GroupScore group_score = GroupScore::kMax;
  bool renormalize = false;
  float routed_scaling_factor = 1.0f;
  bool logits_fp32 = false;  // keep the router's fp32 logits instead of rounding them to the dtype

  // "softmax top-k" / "sigmoid+bias groups 4/8 (sum-top2) renorm x2.5 fp32-logits".
  std::string describe() const;
};

// The precision of y, each routed or shared expert's output times its routing weight, between the
// down GEMM (which accumulates in fp32) and the combine (which sums a token's k + S of them in
// fp32, in a fixed order, and rounds once to the dtype):
//   kF16 (the default): fp16 of y * 2^-8, the scale undone exactly in the combine: 11
//     significant bits (half an ulp: 2^-12 of the value), magnitudes up to ~1.7e7 (beyond, inf
//     in the output: visible, never clipped), and below 2^-6 an absolute step of 2^-16. Half the
//     bytes of kF32, written by the down GEMM and read by the combine (DeepSeek-V3 at T = 16384:
//     2.1 GB fewer each way; docs/PERF.md 20). (Not bf16: its 8 bits cost up to 0.0078 on a slot
//     in [2, 4), past the 1e-2 accuracy rule where slots cancel.)
//   kF32: fp32. The fused decode tile with down tiles in two K halves ("k2", which adds the
//     halves with fp32 atomics) is a candidate only with kF32.
enum class YDType { kF16, kF32 };

const char* to_string(YDType y_dtype);       // "fp16", "fp32"
YDType parse_y_dtype(const std::string& s);  // "fp16", "fp32"; throws Error

struct MoeConfig {
  std::int64_t d_hidden = 0;          // H
  std::int64_t d_expert = 0;          // I
  std::int64_t n_routed_experts = 0;  // E
  std::int64_t n_shared_experts = 0;  // S (0 = none); one dense expert of width S * I
  std::int64_t top_k = 0;             // k
  DType dtype = DType::kBF16;
  RoutingConfig routing;
  YDType y_dtype = YDType::kF16;

  // Throws Error(kInvalidArgument) naming the first bad field and its value.
  void validate() const;
  // "H=7168 I=2048 E=256 S=1 k=8 bf16", then " y=fp32" with YDType::kF32.
  std::string describe() const;
};

// Element size of the activation and weight dtype, in bytes.
constexpr std::int64_t dtype_bytes(DType) { return 2; }
// Element size of y, in bytes.
constexpr std::int64_t y_bytes(YDType y_dtype) { return y_dtype == YDType::kF32 ? 4 : 2; }

}  // namespace rt_moe
