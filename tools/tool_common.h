// What rt_moe_prewarm and rt_moe_bench share: exit codes, the --preset/--config/--dtype choice,
// and the wrapper that turns every exception into a message and an exit code (never a crash).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <stdexcept>
#include <string>

#include "rt_moe/presets.h"

namespace rt_moe::tools {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the work failed (compile error, CUDA error, no GPU)
inline constexpr int kExitUsage = 2;  // bad flags or values, or a request this machine can't serve

// A bad command line found after parsing; exits 2 with its message.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses argv and runs `body`. CLI11 errors and UsageError exit 2; Error(kInvalidArgument) exits
// 2, any other exception 1; each prints "<tool>: <message>" on stderr.
int run_tool(CLI::App& app, int argc, char** argv, const std::function<int()>& body);

// --preset NAME | --config FILE, one of them required, --dtype to override the model's and
// --y-dtype to set MoeConfig::y_dtype; the options are added to `app`.
struct ModelChoice {
  std::string preset;
  std::string config_file;
  std::string dtype;    // empty: the model's
  std::string y_dtype;  // empty: the default (fp16)
  void add_options(CLI::App& app);
  ModelConfig load() const;  // with dtype and y_dtype applied and the layer validated
};

}  // namespace rt_moe::tools
