// One process of the multi-process cache test (tests/cpu/test_cache_processes.cpp):
//
//   rt_moe_cache_child <cache dir> <number of keys> <id> <go file>
//
// Waits until <go file> exists (so that all processes start together), then asks for every key
// with a fake compile, checks every binary it gets, checks that a fresh cache on the same directory
// loads every key, and exits 0. Any failure prints a line on stderr and exits non-zero.
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "disk_cache.h"

namespace fs = std::filesystem;
using namespace rt_moe::cache;

namespace {

// The same preimage and payload as the test that checks the directory afterwards.
Preimage child_preimage(int key) {
  return Preimage().add("test", "cache_child").add("key", std::to_string(key));
}

std::string child_payload(int key) {
  std::string bytes =
      "\x7f"
      "ELF";
  std::uint32_t state = 2166136261u ^ static_cast<std::uint32_t>(key);
  const std::size_t size = 2048 + 97 * static_cast<std::size_t>(key);
  while (bytes.size() < size) {
    state = state * 1664525u + 1013904223u;
    bytes.push_back(static_cast<char>(state >> 24));
  }
  return bytes;
}

int fail(const std::string& what) {
  std::fprintf(stderr, "rt_moe_cache_child: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) return fail("usage: rt_moe_cache_child <dir> <keys> <id> <go file>");
  try {
    const std::string dir = argv[1];
    const int keys = std::stoi(argv[2]);
    const int id = std::stoi(argv[3]);
    const fs::path go = argv[4];

    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!fs::exists(go)) {
      if (std::chrono::steady_clock::now() > deadline) return fail("no go file");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }

    std::mt19937 random(static_cast<unsigned>(id));
    CubinCache cache(CacheOptions{dir});
    if (!cache.persistent()) return fail("cache is not persistent");
    for (int key = 0; key < keys; ++key) {
      const Lookup lookup = cache.get_or_compile(child_preimage(key), [&] {
        // A short, varying compile time makes processes overlap on the same key.
        std::this_thread::sleep_for(std::chrono::microseconds(500 + random() % 2500));
        return child_payload(key);
      });
      if (*lookup.binary != child_payload(key))
        return fail("wrong binary for key " + std::to_string(key));
    }
    for (int key = 0; key < keys; ++key) {
      const Lookup lookup = cache.get_or_compile(child_preimage(key), [] { return std::string(); });
      if (lookup.source != Source::kMemory) return fail("second pass was not a memory hit");
    }
    const CacheStats stats = cache.stats();
    if (stats.corrupt != 0 || stats.store_failures != 0)
      return fail("corrupt entries or store failures");
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
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
