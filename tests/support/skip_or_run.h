// The main of a test binary whose cases need something a machine may lack (a GPU, a
// disassembler): without it, the binary prints why and exits 77, which ctest reports as skipped:
// never failed, never passed. Listing the tests (ctest's discovery at build time) needs nothing.
// Include after <catch2/catch.hpp> with CATCH_CONFIG_RUNNER defined.
#pragma once

#include <cstdio>
#include <string>

namespace rt_moe::test {

inline constexpr int kSkipExitCode = 77;  // SKIP_RETURN_CODE in tests/CMakeLists.txt

// `ready(&why)` says whether the machine has what the tests need (and may print what it found).
template <class Ready>
int skip_or_run(int argc, char** argv, Ready ready) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::string(argv[i]).rfind("--list", 0) == 0;
  if (!listing) {
    std::string why;
    if (!ready(&why)) {
      std::printf("SKIPPED: %s\n", why.c_str());
      return kSkipExitCode;
    }
  }
  return Catch::Session().run(argc, argv);
}

}  // namespace rt_moe::test
