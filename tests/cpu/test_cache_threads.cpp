// Threads of one process sharing a CubinCache: one compile per key at a time, different keys in
// parallel, and compile errors delivered to every waiter without being cached.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

#include "disk_cache.h"
#include "entry.h"
#include "rt_moe/error.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace rt_moe::cache;
using rt_moe::test::TempDir;

namespace {

std::string fake_cubin(char fill) {
  std::string bytes(kElfMagic);
  bytes.resize(4096, fill);
  return bytes;
}

}  // namespace

TEST_CASE("cache threads: many callers of one key compile it once", "[cache]") {
  constexpr int kThreads = 16;
  TempDir tmp;
  CubinCache cache(CacheOptions{tmp.path().string()});
  const Preimage preimage = Preimage().add("source", "shared kernel");
  std::atomic<int> calls{0};
  auto compile = [&] {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // long enough for all to wait
    return fake_cubin('s');
  };

  std::latch start(kThreads);
  std::vector<Lookup> results(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      results[i] = cache.get_or_compile(preimage, compile);
    });
  }
  for (std::thread& thread : threads) thread.join();

  REQUIRE(calls == 1);
  int compiled = 0;
  for (const Lookup& result : results) {
    REQUIRE(result.binary == results[0].binary);  // the very same bytes, shared
    compiled += result.source == Source::kCompiled;
  }
  REQUIRE(compiled == 1);
  const CacheStats stats = cache.stats();
  REQUIRE(stats.compiles == 1);
  REQUIRE(stats.misses == 1);
  REQUIRE(stats.memory_hits == kThreads - 1);
  REQUIRE(stats.disk_hits == 0);
  REQUIRE(stats.stores == 1);
}

TEST_CASE("cache threads: different keys compile in parallel", "[cache]") {
  constexpr int kKeys = 4;
  TempDir tmp;
  CubinCache cache(CacheOptions{tmp.path().string()});
  // Each compile waits until all are in flight. If one key's compile blocked the others (a global
  // lock held while compiling), they would never all be in flight and the wait would time out.
  std::mutex mutex;
  std::condition_variable all_in;
  int in_flight = 0;
  std::atomic<bool> overlapped{true};
  auto compile_for = [&](int key) {
    return [&, key] {
      std::unique_lock lock(mutex);
      ++in_flight;
      all_in.notify_all();
      if (!all_in.wait_for(lock, std::chrono::seconds(30), [&] { return in_flight >= kKeys; })) {
        overlapped = false;
      }
      return fake_cubin(static_cast<char>('a' + key));
    };
  };
  std::vector<std::thread> threads;
  for (int key = 0; key < kKeys; ++key) {
    threads.emplace_back([&, key] {
      cache.get_or_compile(Preimage().add("source", std::to_string(key)), compile_for(key));
    });
  }
  for (std::thread& thread : threads) thread.join();
  REQUIRE(overlapped);
  REQUIRE(cache.stats().compiles == kKeys);
  REQUIRE(cache.stats().stores == kKeys);
}

TEST_CASE("cache threads: a compile error reaches every waiter and is not cached", "[cache]") {
  constexpr int kThreads = 8;
  TempDir tmp;
  CubinCache cache(CacheOptions{tmp.path().string()});
  const Preimage preimage = Preimage().add("source", "broken kernel");
  std::atomic<int> calls{0};
  auto broken = [&]() -> std::string {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    throw rt_moe::Error(rt_moe::ErrorCode::kCompile, "nvrtc: error: expected a ';'");
  };

  std::latch start(kThreads);
  std::atomic<int> caught{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      try {
        cache.get_or_compile(preimage, broken);
      } catch (const rt_moe::Error& e) {
        if (e.code() == rt_moe::ErrorCode::kCompile) ++caught;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  REQUIRE(caught == kThreads);
  REQUIRE(calls >= 1);  // usually 1; a thread that arrives after a failed attempt tries again
  CacheStats stats = cache.stats();
  REQUIRE(stats.compiles == static_cast<std::uint64_t>(calls));
  REQUIRE(stats.stores == 0);
  REQUIRE(stats.memory_hits == 0);  // waiters of a failed attempt got its error, not a hit
  REQUIRE_FALSE(fs::exists(cache.entry_path(preimage.key())));

  // Nothing was cached: the next call compiles again, and then it is cached.
  const Lookup retry = cache.get_or_compile(preimage, [] { return fake_cubin('r'); });
  REQUIRE(retry.source == Source::kCompiled);
  REQUIRE(cache.get_or_compile(preimage, broken).source == Source::kMemory);
  stats = cache.stats();
  REQUIRE(stats.compiles == static_cast<std::uint64_t>(calls) + 1);
  REQUIRE(stats.stores == 1);
}

TEST_CASE("cache threads: a compile result that is not ELF is an error, not an entry", "[cache]") {
  TempDir tmp;
  CubinCache cache(CacheOptions{tmp.path().string()});
  const Preimage preimage = Preimage().add("source", "ptx instead of a cubin");
  try {
    cache.get_or_compile(preimage, [] { return std::string(".version 8.0\n.target sm_90a\n"); });
    FAIL("no error");
  } catch (const rt_moe::Error& e) {
    REQUIRE(e.code() == rt_moe::ErrorCode::kCache);
  }
  REQUIRE_FALSE(fs::exists(cache.entry_path(preimage.key())));
  REQUIRE(cache.stats().compiles == 1);
  REQUIRE(cache.stats().stores == 0);
  REQUIRE(cache.get_or_compile(preimage, [] { return fake_cubin('x'); }).source ==
          Source::kCompiled);
}
