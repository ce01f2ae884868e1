#include "base/env.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace rt_moe {
namespace {

constexpr std::uint64_t kDefaultCacheMaxMb = 2048;

bool truthy(const char* value) {
  if (value == nullptr) return false;
  std::string_view v(value);
  return v == "1" || v == "true" || v == "TRUE" || v == "yes" || v == "on";
}

}  // namespace

EnvConfig parse_env(const char* (*get)(const char* name)) {
  EnvConfig config;
  if (const char* dir = get("RT_MOE_CACHE_DIR"); dir != nullptr && *dir != '\0') {
    config.cache_dir = dir;
  } else if (const char* xdg = get("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    config.cache_dir = std::string(xdg) + "/rt_moe";
  } else if (const char* home = get("HOME"); home != nullptr && *home != '\0') {
    config.cache_dir = std::string(home) + "/.cache/rt_moe";
  }  // else: no usable location; the cache runs in memory.
  config.cache_disabled = truthy(get("RT_MOE_DISABLE_CACHE"));
  config.stage_timeline = truthy(get("RT_MOE_STAGE_TIMELINE"));
  if (const char* file = get("RT_MOE_KERNEL_LOG"); file != nullptr) config.kernel_log = file;

  config.cache_max_bytes = kDefaultCacheMaxMb << 20;
  if (const char* mb = get("RT_MOE_CACHE_MAX_MB"); mb != nullptr && *mb != '\0') {
    char* end = nullptr;
    unsigned long long parsed = std::strtoull(mb, &end, 10);
    if (end != nullptr && *end == '\0' && parsed > 0 && parsed < (1ull << 40)) {
      config.cache_max_bytes = static_cast<std::uint64_t>(parsed) << 20;
    } else {
      std::fprintf(stderr, "rt_moe: ignoring RT_MOE_CACHE_MAX_MB='%s' (want a positive integer)\n",
                   mb);
    }
  }

  config.log_level = "warn";
  if (const char* level = get("RT_MOE_LOG_LEVEL"); level != nullptr && *level != '\0') {
    static constexpr std::string_view kLevels[] = {"trace", "debug",    "info", "warn",
                                                   "error", "critical", "off"};
    bool known = false;
    for (std::string_view l : kLevels) known = known || l == level;
    if (known) {
      config.log_level = level;
    } else {
      std::fprintf(stderr, "rt_moe: ignoring RT_MOE_LOG_LEVEL='%s' (want trace..off)\n", level);
    }
  }
  config.tune = truthy(get("RT_MOE_TUNE"));
  if (const char* home = get("CUDA_HOME"); home != nullptr && *home != '\0') {
    config.cuda_home = home;
  } else if (const char* path = get("CUDA_PATH"); path != nullptr && *path != '\0') {
    config.cuda_home = path;
  }
  return config;
}

const EnvConfig& env() {
  static const EnvConfig config =
      parse_env([](const char* name) -> const char* { return std::getenv(name); });
  return config;
}

}  // namespace rt_moe
