// SASS tests: each test case runs as its own ctest. Without an nvdisasm that runs (scripts/test
// installs one; sass.h says where it is looked for) the binary prints why and exits 77, which ctest
// reports as skipped: never failed, never passed. Listing tests needs no nvdisasm.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "sass.h"
#include "skip_or_run.h"

int main(int argc, char** argv) {
  return rt_moe::test::skip_or_run(argc, argv, [](std::string* why) {
    const std::string nvdisasm = rt_moe::test::find_nvdisasm(why);
    if (nvdisasm.empty()) return false;
    std::printf("nvdisasm: %s\n", nvdisasm.c_str());
    return true;
  });
}
