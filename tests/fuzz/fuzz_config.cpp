// libFuzzer target for model config JSON (rt_moe/presets.h): any bytes a --config file can hold.
//
// parse_model_config() must either return a config that validates or throw rt_moe::Error with
// kInvalidArgument. Anything else (another exception type, a crash, a sanitizer report) is a bug;
// an exception of another type escapes this function, and libFuzzer reports the abort.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "rt_moe/error.h"
#include "rt_moe/presets.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_config: broken invariant: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);  // an exact-size heap copy
  std::optional<rt_moe::ModelConfig> model;
  try {
    model = rt_moe::parse_model_config(text, "fuzz");
  } catch (const rt_moe::Error& e) {
    check(e.code() == rt_moe::ErrorCode::kInvalidArgument, "only kInvalidArgument");
    check(std::string_view(e.what()).find("fuzz") != std::string_view::npos, "names the origin");
    return 0;
  }
  // Outside the try: an Error here means the parser let a bad config through, and aborts.
  model->moe.validate();
  check(model->max_tokens >= 1 && model->max_tokens <= (std::int64_t(1) << 24), "max_tokens");
  check(!model->moe.describe().empty(), "describe");
  return 0;
}
