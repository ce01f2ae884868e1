// GPU tests: each test case runs as its own ctest. Without a usable GPU (no driver, no device,
// or older than sm_80) the binary prints why and exits 77, which ctest reports as skipped: never
// failed, never passed. Listing tests (ctest discovery at build time) needs no GPU.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "driver.h"
#include "skip_or_run.h"

namespace {

// When the whole binary runs under a time limit (on a GPU host, outside ctest) and is killed,
// the report to a file or pipe is lost from its last flush on, so it would not show which case
// was running: each case's name goes to stderr (unbuffered) as it starts, and the report is
// flushed as each case ends.
struct Progress : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    std::cout.flush();
    std::fprintf(stderr, "-- starting: %s\n", info.name.c_str());
  }
  void testCaseEnded(const Catch::TestCaseStats&) override { std::cout.flush(); }
};
CATCH_REGISTER_LISTENER(Progress)

}  // namespace

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
