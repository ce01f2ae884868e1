// The tuner on the GPU (runtime/src/tuner.cpp): with RuntimeOptions::Tuning::kTune a bucket's
// first forward times every tile candidate, keeps the fastest, records every time in the tuning
// store next to the kernel cache, and computes the right output with the tile it kept; a later
// runtime reads the store instead of tuning.
//
// The tuning runs in a child process (this binary again, the hidden test case below) whose
// RT_MOE_CACHE_DIR is a fresh directory, as the runtime reads the environment once: there the
// store starts empty, so the bucket is tuned. The child's cubins come from this process's kernel
// cache (its cubin directory linked in), so a prewarmed cache spares the child every compile.

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "child_process.h"
#include "disk_cache.h"
#include "forward_check.h"
#include "key.h"

namespace rt_moe::test {
namespace {

namespace fs = std::filesystem;

// The "odd shapes" config of test_forward_gpu.cpp at 100 tokens (25 rows an expert): a bucket
// with several candidates of the TMA and swapped kernels on sm_90a.
MoeConfig tuning_config() { return make_config(1032, 200, 16, 1, 4, DType::kBF16); }
constexpr std::int64_t kTokens = 100;

}  // namespace

TEST_CASE(
    "tuning: a bucket's first forward times every candidate, keeps the fastest, records them "
    "all, and the tuned forward is correct",
    "[tune]") {
  std::string pattern = (fs::temp_directory_path() / "rt_moe_tune_XXXXXX").string();
  REQUIRE(mkdtemp(pattern.data()) != nullptr);
  const fs::path dir = pattern;
  const cache::CacheOptions parent = cache::options_from_env();
  const std::string cubins = fmt::format("v{}", cache::kSchemaVersion);
  if (!parent.disabled && !parent.dir.empty() && fs::is_directory(fs::path(parent.dir) / cubins)) {
    fs::create_directory_symlink(fs::absolute(fs::path(parent.dir) / cubins), dir / cubins);
  }
  // The child: this binary, the hidden test case below.
  run_child_test("tuning child", {"RT_MOE_CACHE_DIR=" + dir.string()});

  // The store the child wrote: one record, a time for every candidate, the fastest as best.
  std::ifstream file(dir / "tuning.json");
  REQUIRE(file.good());
  const nlohmann::json root = nlohmann::json::parse(file);
  REQUIRE(root.at("records").size() == 1);
  const nlohmann::json& record = root.at("records").begin().value();
  const nlohmann::json& candidates = record.at("candidates");
  INFO(record.dump(2));
  CHECK(candidates.size() >= 2);
  std::string fastest;
  double fastest_ms = std::numeric_limits<double>::infinity();
  for (auto it = candidates.begin(); it != candidates.end(); ++it) {
    // null: a candidate that failed; none should, on a GPU that runs this test.
    REQUIRE(it.value().is_number());
    const double ms = it.value().get<double>();
    CHECK(std::isfinite(ms));
    CHECK(ms > 0);
    if (ms < fastest_ms) {
      fastest_ms = ms;
      fastest = it.key();
    }
  }
  CHECK(record.at("best") == fastest);
  fs::remove_all(dir);
}

TEST_CASE("tuning child", "[.child]") {
  const char* dir = std::getenv("RT_MOE_CACHE_DIR");
  REQUIRE(dir != nullptr);
  REQUIRE(!fs::exists(fs::path(dir) / "tuning.json"));
  RuntimeOptions options;
  options.tuning = RuntimeOptions::Tuning::kTune;
  Fixture tuned(tuning_config(), 61, options);
  // The first forward tunes the bucket, then runs with the tile it kept: checked against the
  // reference like every other forward.
  tuned.check(kTokens, 600, "tuned");
  REQUIRE(fs::exists(fs::path(dir) / "tuning.json"));
  const std::string plan = tuned.moe.describe(kTokens);
  // A runtime that only reads the store (the default) takes the same tile without tuning.
  Fixture stored(tuning_config(), 61);
  stored.check(kTokens, 601, "stored");
  CHECK(stored.moe.describe(kTokens) == plan);
}

}  // namespace rt_moe::test
