#include "rt_moe/presets.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>

#include "embedded_files.h"
#include "rt_moe/error.h"

namespace rt_moe {
namespace detail {
// tools/presets/*.json, embedded by tools/presets/CMakeLists.txt.
std::span<const EmbeddedFile> embedded_presets();
}  // namespace detail

namespace {

using nlohmann::json;

constexpr std::string_view kPresetSuffix = ".json";
// No server runs more tokens than this through one layer in one forward; the bound keeps the
// bucket ladder (and the tools' loops over it) short.
constexpr std::int64_t kMaxTokensBound = std::int64_t(1) << 24;
// MoeConfig::validate() allows up to 1e6.
constexpr double kMaxScalingFactor = 1e6;

[[noreturn]] void fail(const std::string& origin, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, fmt::format("{}: {}", origin, what));
}

// A config file is untrusted: it may hold a huge or deeply nested value, so JSON is parsed to a
// bounded depth and a bad value is described by its type and a short prefix only (dump() of a
// whole value would recurse once per level and copy every byte).
constexpr int kMaxJsonDepth = 16;  // the schema itself needs 2
constexpr std::size_t kShownChars = 40;

// `text` cut to kShownChars bytes for a message (it may end inside a UTF-8 sequence; JSON text
// is only ever shown through dump(), which replaces what it cannot encode).
std::string clipped(std::string_view text, std::size_t limit = kShownChars) {
  if (text.size() <= limit) return std::string(text);
  return std::string(text.substr(0, limit - 3)) + "...";
}

std::string shown(const json& value) {
  std::string text;
  if (value.is_array()) {
    text = fmt::format("of {} elements", value.size());
  } else if (value.is_object()) {
    text = fmt::format("of {} keys", value.size());
  } else {
    const json head =
        value.is_string() ? json(clipped(value.get_ref<const std::string&>())) : value;
    text = clipped(head.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  return fmt::format("{} {}", value.type_name(), text);
}

// A string value of the config, quoted and clipped for a message.
std::string json_string(const std::string& text) {
  return json(clipped(text)).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Reads the keys of one JSON object, rejecting any key it was not asked about.
class ObjectReader {
 public:
  ObjectReader(const json& object, std::string origin, std::string prefix)
      : object_(object), origin_(std::move(origin)), prefix_(std::move(prefix)) {}

  const json* find(const std::string& key, bool required) {
    known_.push_back(key);
    auto it = object_.find(key);
    if (it == object_.end()) {
      if (required) fail(origin_, fmt::format("missing required key '{}{}'", prefix_, key));
      return nullptr;
    }
    return &*it;
  }

  std::int64_t integer(const std::string& key, bool required, std::int64_t fallback) {
    const json* v = find(key, required);
    if (v == nullptr) return fallback;
    if (v->is_number_unsigned() &&
        v->get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max())) {
      fail(origin_, fmt::format("'{}{}' = {} is out of range", prefix_, key, v->dump()));
    }
    if (!v->is_number_integer()) {
      fail(origin_, fmt::format("'{}{}' must be an integer, got {}", prefix_, key, shown(*v)));
    }
    return v->get<std::int64_t>();
  }

  double number(const std::string& key, double fallback) {
    const json* v = find(key, false);
    if (v == nullptr) return fallback;
    if (!v->is_number()) {
      fail(origin_, fmt::format("'{}{}' must be a number, got {}", prefix_, key, shown(*v)));
    }
    return v->get<double>();
  }

  bool boolean(const std::string& key, bool fallback) {
    const json* v = find(key, false);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) {
      fail(origin_, fmt::format("'{}{}' must be true or false, got {}", prefix_, key, shown(*v)));
    }
    return v->get<bool>();
  }

  std::string string(const std::string& key, const std::string& fallback) {
    const json* v = find(key, false);
    if (v == nullptr) return fallback;
    if (!v->is_string()) {
      fail(origin_, fmt::format("'{}{}' must be a string, got {}", prefix_, key, shown(*v)));
    }
    return v->get<std::string>();
  }

  const json* object(const std::string& key) {
    const json* v = find(key, false);
    if (v != nullptr && !v->is_object()) {
      fail(origin_, fmt::format("'{}{}' must be an object, got {}", prefix_, key, shown(*v)));
    }
    return v;
  }

  // Call after every key was read: a key nobody asked about is a typo or a newer schema.
  void reject_unknown() const {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      if (std::find(known_.begin(), known_.end(), it.key()) == known_.end()) {
        fail(origin_, fmt::format("unknown key '{}{}' (known keys: {})", prefix_, clipped(it.key()),
                                  fmt::join(known_, ", ")));
      }
    }
  }

 private:
  const json& object_;
  std::string origin_;
  std::string prefix_;
  std::vector<std::string> known_;
};

RoutingConfig parse_routing(const json& object, const std::string& origin) {
  ObjectReader r(object, origin, "routing.");
  RoutingConfig routing;
  std::string score = r.string("score", "softmax");
  if (score == "softmax") {
    routing.score = RoutingConfig::Score::kSoftmax;
  } else if (score == "sigmoid") {
    routing.score = RoutingConfig::Score::kSigmoid;
  } else {
    fail(origin, fmt::format("'routing.score' = {} must be \"softmax\" or \"sigmoid\"",
                             json_string(score)));
  }
  routing.correction_bias = r.boolean("correction_bias", routing.correction_bias);
  // Ranges (n_group divides E, ...) are validate()'s; here only what fits in an int.
  auto small_int = [&](const std::string& key, int fallback) {
    const std::int64_t v = r.integer(key, false, fallback);
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
      fail(origin, fmt::format("'routing.{}' = {} is out of range", key, v));
    }
    return int(v);
  };
  routing.n_group = small_int("n_group", routing.n_group);
  routing.topk_group = small_int("topk_group", routing.topk_group);
  std::string group_score = r.string("group_score", "max");
  if (group_score == "max") {
    routing.group_score = RoutingConfig::GroupScore::kMax;
  } else if (group_score == "sum_top2") {
    routing.group_score = RoutingConfig::GroupScore::kSumTop2;
  } else {
    fail(origin, fmt::format("'routing.group_score' = {} must be \"max\" or \"sum_top2\"",
                             json_string(group_score)));
  }
  routing.renormalize = r.boolean("renormalize", routing.renormalize);
  // Range-checked as a double: converting a double beyond float's range to float is undefined.
  const double scale = r.number("routed_scaling_factor", routing.routed_scaling_factor);
  if (!(scale > 0.0) || scale > kMaxScalingFactor) {
    fail(origin, fmt::format("'routing.routed_scaling_factor' = {} must be in (0, {}]", scale,
                             kMaxScalingFactor));
  }
  routing.routed_scaling_factor = float(scale);
  routing.logits_fp32 = r.boolean("logits_fp32", routing.logits_fp32);
  r.reject_unknown();
  return routing;
}

}  // namespace

ModelConfig parse_model_config(std::string_view text, const std::string& origin) {
  json root;
  try {
    const json::parser_callback_t bounded = [&](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth) {
        fail(origin, fmt::format("malformed JSON: nested deeper than {} levels", kMaxJsonDepth));
      }
      return true;
    };
    root = json::parse(text.begin(), text.end(), bounded);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number beyond double (1e400). Both quote the token
    // they stopped at, which can be as long as the file.
    fail(origin, fmt::format("malformed JSON: {}", clipped(e.what(), 4 * kShownChars)));
  }
  if (!root.is_object()) fail(origin, fmt::format("want a JSON object, got {}", shown(root)));

  ObjectReader r(root, origin, "");
  ModelConfig model;
  model.name = r.string("name", "");
  model.description = r.string("description", "");
  MoeConfig& c = model.moe;
  c.d_hidden = r.integer("d_hidden", true, 0);
  c.d_expert = r.integer("d_expert", true, 0);
  c.n_routed_experts = r.integer("n_routed_experts", true, 0);
  c.n_shared_experts = r.integer("n_shared_experts", true, 0);
  c.top_k = r.integer("top_k", true, 0);
  std::string dtype = r.string("dtype", "bf16");
  model.max_tokens = r.integer("max_tokens", false, model.max_tokens);
  if (const json* routing = r.object("routing")) c.routing = parse_routing(*routing, origin);
  r.reject_unknown();

  if (dtype != "bf16" && dtype != "fp16") {
    fail(origin, fmt::format("'dtype' = {} must be \"bf16\" or \"fp16\"", json_string(dtype)));
  }
  c.dtype = parse_dtype(dtype);
  if (model.max_tokens < 1 || model.max_tokens > kMaxTokensBound) {
    fail(origin,
         fmt::format("'max_tokens' = {} must be in [1, {}]", model.max_tokens, kMaxTokensBound));
  }
  try {
    c.validate();
  } catch (const Error& e) {
    // validate() names the field and its value; add where it came from.
    std::string what = e.what();
    const std::string prefix = "rt_moe: invalid argument: ";
    if (what.rfind(prefix, 0) == 0) what = what.substr(prefix.size());
    fail(origin, what);
  }
  return model;
}

ModelConfig load_config_file(const std::string& path) {
  const std::string origin = fmt::format("config file '{}'", path);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    fail(origin, std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) fail(origin, "cannot be read");
  ModelConfig model = parse_model_config(text.str(), origin);
  if (model.name.empty()) model.name = std::filesystem::path(path).stem().string();
  return model;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const detail::EmbeddedFile& file : detail::embedded_presets()) {
    std::string_view name = file.name;
    if (name.ends_with(kPresetSuffix)) name.remove_suffix(kPresetSuffix.size());
    names.emplace_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

ModelConfig preset(const std::string& name) {
  for (const detail::EmbeddedFile& file : detail::embedded_presets()) {
    if (file.name == name + std::string(kPresetSuffix)) {
      ModelConfig model = parse_model_config(file.data, fmt::format("preset '{}'", name));
      if (model.name.empty()) model.name = name;
      return model;
    }
  }
  throw Error(ErrorCode::kInvalidArgument, fmt::format("unknown preset '{}' (known presets: {})",
                                                       name, fmt::join(preset_names(), ", ")));
}

}  // namespace rt_moe
