// GPU tests: each test case runs as its own ctest. Without a usable GPU (no driver, no device,
// or older than sm_80) the binary prints why and exits 77, which ctest reports as skipped: never
// failed, never passed. Listing tests (ctest discovery at build time) needs no GPU.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "driver.h"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::string(argv[i]).rfind("--list", 0) == 0;
  if (!listing) {
    std::string why;
    if (!rt_moe::driver::available(&why)) {
      std::printf("SKIPPED: no usable GPU: %s\n", why.c_str());
      return 77;
    }
    rt_moe::driver::DeviceInfo info = rt_moe::driver::device_info(0);
    if (info.cc_major < 8) {
      std::printf("SKIPPED: %s is sm_%d%d; rt_moe's GPU tests need sm_80 or newer\n",
                  info.name.c_str(), info.cc_major, info.cc_minor);
      return 77;
    }
    std::printf("GPU: %s (%s, %d SMs, driver %d)\n", info.name.c_str(), info.arch().c_str(),
                info.sm_count, info.driver_version);
  }
  return Catch::Session().run(argc, argv);
}
