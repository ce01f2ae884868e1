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

TEST_CASE("MoeConfig::y_dtype: parsed, described, a bad value refused naming it", "[options]") {
  CHECK(parse_y_dtype("fp16") == YDType::kF16);
  CHECK(parse_y_dtype("fp32") == YDType::kF32);
  for (const char* bad : {"bf16", "fp8", ""}) {
    try {
      parse_y_dtype(bad);
      FAIL("y dtype '" << bad << "' was accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidArgument);
      CHECK(std::string(e.what()).find(std::string("'") + bad + "'") != std::string::npos);
    }
  }
  MoeConfig c = preset("tiny").moe;
  CHECK(c.y_dtype == YDType::kF16);  // the default
  CHECK(c.describe().find("y=") == std::string::npos);
  c.y_dtype = YDType::kF32;
  CHECK(c.describe().ends_with(" y=fp32"));
  c.y_dtype = static_cast<YDType>(7);
  try {
    MoeRuntime moe(c);
    FAIL("y_dtype = 7 was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(std::string(e.what()).find("y_dtype = 7") != std::string::npos);
  }
}

}  // namespace rt_moe
