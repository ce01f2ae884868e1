#include "tool_common.h"

#include <fmt/format.h>

#include <cstdio>

#include "rt_moe/error.h"

namespace rt_moe::tools {

int run_tool(CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  const std::string tool = app.get_name();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; CLI11's own error codes (100+) are folded into "usage".
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", tool.c_str(), e.what());
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n", tool.c_str(), e.what());
    return e.code() == ErrorCode::kInvalidArgument ? kExitUsage : kExitFailure;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", tool.c_str(), e.what());
    return kExitFailure;
  }
}

void ModelChoice::add_options(CLI::App& app) {
  auto* preset_option = app.add_option(
      "--preset", preset, fmt::format("Model preset: {}", fmt::join(preset_names(), ", ")));
  auto* config_option =
      app.add_option("--config", config_file, "Model config JSON file (the presets' schema)");
  preset_option->excludes(config_option);
  config_option->excludes(preset_option);
  app.add_option("--dtype", dtype, "Activation and weight dtype (default: the model's)")
      ->check(CLI::IsMember({"bf16", "fp16"}));
  app.add_option("--y-dtype", y_dtype,
                 "Precision of the experts' outputs between the down GEMM and the combine "
                 "(default: fp16, scaled)")
      ->check(CLI::IsMember({"fp16", "fp32"}));
}

ModelConfig ModelChoice::load() const {
  if (preset.empty() == config_file.empty()) {
    throw UsageError("give exactly one of --preset NAME or --config FILE (presets: " +
                     fmt::format("{}", fmt::join(preset_names(), ", ")) + ")");
  }
  ModelConfig model = preset.empty() ? load_config_file(config_file) : rt_moe::preset(preset);
  if (!dtype.empty()) model.moe.dtype = parse_dtype(dtype);
  if (!y_dtype.empty()) model.moe.y_dtype = parse_y_dtype(y_dtype);
  model.moe.validate();
  return model;
}

}  // namespace rt_moe::tools
