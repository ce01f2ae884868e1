// Processes racing on one cache directory: each key ends up as exactly one valid entry, and no
// staging file is left behind.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "../helpers/cache_child_keys.h"
#include "disk_cache.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace rt_moe::cache;
using rt_moe::cache::test::child_payload;
using rt_moe::cache::test::child_preimage;
using rt_moe::test::run_together;
using rt_moe::test::TempDir;

TEST_CASE("cache: processes racing on one directory leave one valid entry per key", "[cache]") {
  constexpr int kProcesses = 8;
  constexpr int kKeys = 20;
  const std::string child = RT_MOE_TEST_HELPER_DIR "/rt_moe_cache_child";
  REQUIRE(fs::exists(child));
  TempDir tmp;
  const fs::path dir = tmp.path() / "cache";
  const fs::path go = tmp.path() / "go";

  std::vector<std::vector<std::string>> children;
  for (int id = 0; id < kProcesses; ++id) {
    children.push_back(
        {child, dir.string(), std::to_string(kKeys), std::to_string(id), go.string()});
  }
  run_together(children, go);

  int entries = 0;
  std::string unexpected;  // staging or probe files left behind
  for (const fs::directory_entry& file : fs::recursive_directory_iterator(dir)) {
    if (!file.is_regular_file()) continue;
    if (file.path().extension() == ".cubin" && file.path().filename().string()[0] != '.') {
      ++entries;
    } else {
      unexpected += file.path().string() + " ";
    }
  }
  REQUIRE(entries == kKeys);
  INFO("unexpected files: " << unexpected);
  REQUIRE(unexpected.empty());

  CubinCache fresh(CacheOptions{dir.string()});
  for (int key = 0; key < kKeys; ++key) {
    INFO("key " << key);
    REQUIRE(fresh.load(child_preimage(key)) == child_payload(key));
  }
  const CacheStats stats = fresh.stats();
  REQUIRE(stats.disk_hits == kKeys);
  REQUIRE(stats.corrupt == 0);
}
