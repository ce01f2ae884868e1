// One process of the multi-process cache tests (tests/cpu/test_cache_processes.cpp and
// test_cache_stress.cpp):
//
//   rt_moe_cache_child <cache dir> <number of keys> <id> <go file>
//   rt_moe_cache_child stress <cache dir> <number of keys> <id> <go file>
//
// Waits until <go file> exists (so that all processes start together), then asks for every key
// with a fake compile, checks every binary it gets, checks that a fresh cache on the same directory
// loads every key, and exits 0. Any failure prints a line on stderr and exits non-zero.
// The stress mode asks for the keys in an order of its own (shuffled by <id>), compiles slower
// (2-8 ms) and pauses 4-6 ms after each key, so that a run lasts long enough to be killed mid-way
// and the processes store different keys at the same time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cache_child_keys.h"
#include "disk_cache.h"

namespace fs = std::filesystem;
using namespace rt_moe::cache;
using rt_moe::cache::test::child_payload;
using rt_moe::cache::test::child_preimage;

namespace {

struct Pace {
  bool shuffle = false;
  int compile_min_us = 500;  // a compile sleeps in [min, min + spread)
  int compile_spread_us = 2500;
  int pause_min_us = 0;  // between keys, in [min, min + spread)
  int pause_spread_us = 0;
};

int fail(const std::string& what) {
  std::fprintf(stderr, "rt_moe_cache_child: %s\n", what.c_str());
  return 1;
}

int run(const std::string& dir, int keys, int id, const fs::path& go, const Pace& pace) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(go)) {
    if (std::chrono::steady_clock::now() > deadline) return fail("no go file");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  std::mt19937 random(static_cast<unsigned>(id));
  auto sleep_us = [&](int min, int spread) {
    if (min + spread > 0) {
      const int us = min + (spread > 0 ? static_cast<int>(random() % unsigned(spread)) : 0);
      std::this_thread::sleep_for(std::chrono::microseconds(us));
    }
  };
  std::vector<int> order(static_cast<std::size_t>(keys));
  std::iota(order.begin(), order.end(), 0);
  if (pace.shuffle) std::shuffle(order.begin(), order.end(), random);

  CubinCache cache(CacheOptions{dir});
  if (!cache.persistent()) return fail("cache is not persistent");
  for (const int key : order) {
    const Lookup lookup = cache.get_or_compile(child_preimage(key), [&] {
      // A varying compile time makes processes overlap on the same key.
      sleep_us(pace.compile_min_us, pace.compile_spread_us);
      return child_payload(key);
    });
    if (*lookup.binary != child_payload(key)) {
      return fail("wrong binary for key " + std::to_string(key));
    }
    sleep_us(pace.pause_min_us, pace.pause_spread_us);
  }
  for (int key = 0; key < keys; ++key) {
    const Lookup lookup = cache.get_or_compile(child_preimage(key), [] { return std::string(); });
    if (lookup.source != Source::kMemory) return fail("second pass was not a memory hit");
  }
  const CacheStats stats = cache.stats();
  if (stats.corrupt != 0 || stats.store_failures != 0) {
    return fail("corrupt entries or store failures");
  }
  if (stats.compiles + stats.disk_hits != static_cast<std::uint64_t>(keys)) {
    return fail("compiles + disk hits != keys");
  }

  CubinCache fresh(CacheOptions{dir});
  for (int key = 0; key < keys; ++key) {
    if (fresh.load(child_preimage(key)) != child_payload(key)) {
      return fail("a fresh cache cannot load key " + std::to_string(key));
    }
  }
  std::printf("child %d: %llu compiles, %llu disk hits, %llu stores\n", id,
              static_cast<unsigned long long>(stats.compiles),
              static_cast<unsigned long long>(stats.disk_hits),
              static_cast<unsigned long long>(stats.stores));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  Pace pace;
  if (!args.empty() && args[0] == "stress") {
    args.erase(args.begin());
    pace = Pace{true, 2000, 6000, 4000, 2000};
  }
  if (args.size() != 4) {
    return fail("usage: rt_moe_cache_child [stress] <dir> <keys> <id> <go file>");
  }
  try {
    return run(args[0], std::stoi(args[1]), std::stoi(args[2]), args[3], pace);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
