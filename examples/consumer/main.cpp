// The smallest rt_moe application: a validated config from a preset and a runtime for GPU 0.
// Without a GPU (or driver) the runtime's constructor throws Error(kNoDriver), which is not a
// failure here.
#include <cstdio>

#include "rt_moe/presets.h"
#include "rt_moe/runtime.h"

int main() {
  try {
    const rt_moe::MoeConfig config = rt_moe::preset("tiny").moe;
    config.validate();
    std::printf("config: %s\n", config.describe().c_str());
    try {
      rt_moe::MoeRuntime moe(config);
      std::printf("runtime: %s\n", moe.describe(1).c_str());
    } catch (const rt_moe::Error& e) {
      if (e.code() != rt_moe::ErrorCode::kNoDriver) throw;
      std::printf("no GPU: %s\n", e.what());
    }
    return 0;
  } catch (const rt_moe::Error& e) {
    std::fprintf(stderr, "rt_moe error (%s): %s\n", rt_moe::to_string(e.code()), e.what());
    return 1;
  }
}
