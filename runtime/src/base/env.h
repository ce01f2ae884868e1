// Every environment variable rt_moe reads, read once into one struct (never in a hot path).
#pragma once

#include <cstdint>
#include <string>

namespace rt_moe {

struct EnvConfig {
  std::string cache_dir;  // RT_MOE_CACHE_DIR, else $XDG_CACHE_HOME/rt_moe, else ~/.cache/rt_moe
  bool cache_disabled = false;    // RT_MOE_DISABLE_CACHE=1
  std::uint64_t cache_max_bytes;  // RT_MOE_CACHE_MAX_MB (default 2048 MB)
  std::string log_level;          // RT_MOE_LOG_LEVEL (default "warn")
  bool tune = false;              // RT_MOE_TUNE=1
  // RT_MOE_STAGE_TIMELINE=1: every kernel records when its first block started and its last warp
  // ended (MoeRuntime::stage_timeline); a diagnostic, it changes the kernels' source and cache
  // keys.
  bool stage_timeline = false;
  // RT_MOE_KERNEL_LOG=FILE: every distinct kernel the process compiles or loads from the cache is
  // appended to FILE as one line (kernels.h: kernel_log_line), which `rt_moe_prewarm --kernels
  // FILE` compiles into another cache: the kernels a workload needs, without its model's config.
  std::string kernel_log;
  std::string cuda_home;  // CUDA_HOME, else CUDA_PATH (may be empty)
};

// Parsed once, on first use. Bad values are reported on stderr once and replaced by the default.
const EnvConfig& env();

// Parsing itself, for tests: `get` returns the variable's value or nullptr.
EnvConfig parse_env(const char* (*get)(const char* name));

}  // namespace rt_moe
