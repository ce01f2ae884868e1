// RuntimeOptions are checked before the runtime touches the driver, so bad values give the same
// clear error on any machine (these tests need no GPU).
#include <catch2/catch.hpp>

#include <string>

#include "rt_moe/error.h"
#include "rt_moe/presets.h"
#include "rt_moe/runtime.h"

namespace rt_moe {

TEST_CASE("RuntimeOptions: tile_band out of range is refused, naming the value", "[options]") {
  for (int band : {-1, -100, (1 << 20) + 1}) {
    RuntimeOptions options;
    options.tile_band = band;
    INFO("tile_band = " << band);
    try {
      MoeRuntime moe(preset("tiny").moe, options);
      FAIL("tile_band = " << band << " was accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidArgument);
      CHECK(std::string(e.what()).find("tile_band = " + std::to_string(band)) != std::string::npos);
    }
  }
}

}  // namespace rt_moe
