// Model configurations as JSON files: the presets shipped with rt_moe (embedded in the library,
// tools/presets/*.json) and user files of the same schema, for the tools and for applications.
//
//   {"name": "deepseek-v3", "description": "...",
//    "d_hidden": 7168, "d_expert": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
//    "top_k": 8, "dtype": "bf16", "max_tokens": 16384,
//    "routing": {"score": "sigmoid", "correction_bias": true, "n_group": 8, "topk_group": 4,
//                "group_score": "sum_top2", "renormalize": true, "routed_scaling_factor": 2.5,
//                "logits_fp32": false}}
//
// The five sizes are required; name (default: the file's stem), description, dtype (bf16),
// max_tokens (16384) and routing are optional, and so is every key of routing (RoutingConfig,
// config.h; its defaults are the reference's): score "softmax" | "sigmoid"; correction_bias
// (false); n_group (1) and topk_group (1); group_score "max" | "sum_top2" ("max"); renormalize
// (false); routed_scaling_factor (1.0, in (0, 1e6]); logits_fp32 (false). An unknown key, a value
// of the wrong type or out of range, malformed JSON or a missing file throw
// Error(kInvalidArgument) naming the key (or the file) and the bad value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rt_moe/config.h"

namespace rt_moe {

struct ModelConfig {
  MoeConfig moe;  // validated
  std::string name;
  std::string description;
  std::int64_t max_tokens = 16384;  // the most tokens per forward the model's server runs
};

// `origin` names the text in error messages (a file path, a preset name).
ModelConfig parse_model_config(std::string_view json, const std::string& origin);
ModelConfig load_config_file(const std::string& path);

// A preset by name (see preset_names()); an unknown name throws Error(kInvalidArgument) listing
// the known ones.
ModelConfig preset(const std::string& name);
std::vector<std::string> preset_names();  // sorted

}  // namespace rt_moe
