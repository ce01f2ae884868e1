#include "rt_moe/config.h"

#include <fmt/format.h>

#include "rt_moe/error.h"

namespace rt_moe {

const char* to_string(DType dtype) { return dtype == DType::kF16 ? "fp16" : "bf16"; }

DType parse_dtype(const std::string& s) {
  if (s == "fp16" || s == "f16" || s == "half" || s == "float16") return DType::kF16;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("unknown dtype '{}' (want bf16 or fp16)", s));
}

const char* to_string(YDType y_dtype) { return y_dtype == YDType::kF32 ? "fp32" : "fp16"; }

YDType parse_y_dtype(const std::string& s) {
  if (s == "fp16" || s == "f16") return YDType::kF16;
  if (s == "fp32" || s == "f32" || s == "float32") return YDType::kF32;
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("unknown y dtype '{}' (want fp16 or fp32)", s));
}

void MoeConfig::validate() const {
  auto fail = [](const std::string& what) { throw Error(ErrorCode::kInvalidArgument, what); };
  if (y_dtype != YDType::kF16 && y_dtype != YDType::kF32) {
    fail(fmt::format("y_dtype = {} is neither YDType::kF16 nor YDType::kF32", int(y_dtype)));
  }
  // 16-byte vector loads of 2-byte elements need rows that are multiples of 8 elements.
  if (d_hidden <= 0 || d_hidden % 8 != 0 || d_hidden > (1 << 20)) {
    fail(fmt::format("d_hidden = {} must be a positive multiple of 8 up to 2^20", d_hidden));
  }
  if (d_expert <= 0 || d_expert % 8 != 0 || d_expert > (1 << 20)) {
    fail(fmt::format("d_expert = {} must be a positive multiple of 8 up to 2^20", d_expert));
  }
  if (n_routed_experts <= 0 || n_routed_experts > 1024) {
    fail(fmt::format("n_routed_experts = {} must be in [1, 1024]", n_routed_experts));
  }
  if (n_shared_experts < 0 || n_shared_experts > 64) {
    fail(fmt::format("n_shared_experts = {} must be in [0, 64]", n_shared_experts));
  }
  if (top_k <= 0 || top_k > n_routed_experts || top_k > 64) {
    fail(fmt::format("top_k = {} must be in [1, min(n_routed_experts = {}, 64)]", top_k,
                     n_routed_experts));
  }
  if (!(routing.routed_scaling_factor > 0.0f) || routing.routed_scaling_factor > 1e6f) {
    fail(fmt::format("routed_scaling_factor = {} must be positive and finite",
                     routing.routed_scaling_factor));
  }
  using Routing = RoutingConfig;
  if (routing.score != Routing::Score::kSoftmax && routing.score != Routing::Score::kSigmoid) {
    fail(fmt::format("routing.score = {} is not a RoutingConfig::Score", int(routing.score)));
  }
  if (routing.group_score != Routing::GroupScore::kMax &&
      routing.group_score != Routing::GroupScore::kSumTop2) {
    fail(fmt::format("routing.group_score = {} is not a RoutingConfig::GroupScore",
                     int(routing.group_score)));
  }
  // The routing kernel keeps one bit per group in a 32-bit mask.
  if (routing.n_group < 1 || routing.n_group > 32 || n_routed_experts % routing.n_group != 0) {
    fail(fmt::format("routing.n_group = {} must be in [1, 32] and divide n_routed_experts = {}",
                     routing.n_group, n_routed_experts));
  }
  if (routing.topk_group < 1 || routing.topk_group > routing.n_group) {
    fail(fmt::format("routing.topk_group = {} must be in [1, n_group = {}]", routing.topk_group,
                     routing.n_group));
  }
  const std::int64_t group_size = n_routed_experts / routing.n_group;
  if (top_k > routing.topk_group * group_size) {
    fail(fmt::format(
        "top_k = {} exceeds the {} experts of the kept groups (topk_group = {} of "
        "n_group = {} groups of {} experts)",
        top_k, routing.topk_group * group_size, routing.topk_group, routing.n_group, group_size));
  }
  if (routing.n_group > 1 && routing.group_score == Routing::GroupScore::kSumTop2 &&
      group_size < 2) {
    fail(
        fmt::format("routing.group_score = sum of the top 2 needs groups of 2 or more experts, "
                    "but n_group = {} makes groups of {}",
                    routing.n_group, group_size));
  }
}

std::string RoutingConfig::describe() const {
  std::string text = score == Score::kSigmoid ? "sigmoid" : "softmax";
  if (correction_bias) text += "+bias";
  if (n_group > 1) {
    text += fmt::format(" groups {}/{} ({})", topk_group, n_group,
                        group_score == GroupScore::kSumTop2 ? "sum-top2" : "max");
  }
  text += " top-k";
  if (renormalize) text += " renorm";
  if (routed_scaling_factor != 1.0f) text += fmt::format(" x{}", routed_scaling_factor);
  if (logits_fp32) text += " fp32-logits";
  return text;
}

std::string MoeConfig::describe() const {
  return fmt::format("H={} I={} E={} S={} k={} {}{}", d_hidden, d_expert, n_routed_experts,
                     n_shared_experts, top_k, to_string(dtype),
                     y_dtype == YDType::kF32 ? " y=fp32" : "");
}

}  // namespace rt_moe
