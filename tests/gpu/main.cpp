// GPU tests: each test case runs as its own ctest. Without a usable GPU (no driver, no device,
// or older than sm_80) the binary prints why and exits 77, which ctest reports as skipped: never
// failed, never passed. Listing tests (ctest discovery at build time) needs no GPU.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "driver.h"
#include "skip_or_run.h"

int main(int argc, char** argv) {
  return rt_moe::test::skip_or_run(argc, argv, [](std::string* why) {
    if (!rt_moe::driver::available(why)) {
      *why = "no usable GPU: " + *why;
      return false;
    }
    rt_moe::driver::DeviceInfo info = rt_moe::driver::device_info(0);
    if (info.cc_major < 8) {
      *why = info.name + " is sm_" + std::to_string(info.cc_major) + std::to_string(info.cc_minor) +
             "; rt_moe's GPU tests need sm_80 or newer";
      return false;
    }
    std::printf("GPU: %s (%s, %d SMs, driver %d)\n", info.name.c_str(), info.arch().c_str(),
                info.sm_count, info.driver_version);
    return true;
  });
}
