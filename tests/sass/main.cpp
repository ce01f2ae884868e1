// SASS tests: each test case runs as its own ctest. Without an nvdisasm that runs (scripts/test
// installs one; sass.h says where it is looked for) the binary prints why and exits 77, which ctest
// reports as skipped: never failed, never passed. Listing tests needs no nvdisasm.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "sass.h"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::string(argv[i]).rfind("--list", 0) == 0;
  if (!listing) {
    std::string why;
    const std::string nvdisasm = rt_moe::test::find_nvdisasm(&why);
    if (nvdisasm.empty()) {
      std::printf("SKIPPED: %s\n", why.c_str());
      return 77;
    }
    std::printf("nvdisasm: %s\n", nvdisasm.c_str());
  }
  return Catch::Session().run(argc, argv);
}
