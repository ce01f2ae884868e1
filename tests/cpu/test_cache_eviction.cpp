// The LRU bound on the cache directory: the oldest entries go first, a disk hit makes an entry
// young again, the entry just stored always stays, and stale staging files are cleaned up.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <vector>

#include "disk_cache.h"
#include "entry.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace rt_moe::cache;
using rt_moe::test::TempDir;

namespace {

constexpr std::size_t kPayloadBytes = 1000;

std::string fake_cubin(int id) {
  std::string bytes(kElfMagic);
  bytes.resize(kPayloadBytes, static_cast<char>('a' + id));
  return bytes;
}

// Same-length preimages, so that every entry has the same size.
std::vector<Preimage> preimages(int count) {
  std::vector<Preimage> result;
  for (int i = 0; i < count; ++i)
    result.push_back(Preimage().add("source", "kernel " + std::to_string(i)));
  return result;
}

std::uint64_t entry_bytes(const Preimage& preimage) {
  return kEntryHeaderBytes + preimage.bytes().size() + kPayloadBytes;
}

// Entries written within one test can share an mtime tick; give each a distinct, ordered age.
void set_age(const fs::path& path, int seconds_ago) {
  fs::last_write_time(path, fs::file_time_type::clock::now() - std::chrono::seconds(seconds_ago));
}

}  // namespace

TEST_CASE("cache eviction: the least recently used entries go first", "[cache]") {
  TempDir tmp;
  const std::vector<Preimage> p = preimages(6);
  const std::uint64_t room_for_three = 3 * entry_bytes(p[0]) + entry_bytes(p[0]) / 2;
  CubinCache cache(CacheOptions{tmp.path().string(), false, room_for_three});
  for (int i = 0; i < 6; ++i) {
    REQUIRE(cache.get_or_compile(p[i], [i] { return fake_cubin(i); }).source == Source::kCompiled);
    set_age(cache.entry_path(p[i].key()), 1000 - i);
  }
  const CacheStats stats = cache.stats();
  REQUIRE(stats.stores == 6);
  REQUIRE(stats.evictions == 3);
  for (int i = 0; i < 3; ++i) REQUIRE_FALSE(fs::exists(cache.entry_path(p[i].key())));
  for (int i = 3; i < 6; ++i) REQUIRE(fs::exists(cache.entry_path(p[i].key())));

  // Evicted from disk, still in this process's memory.
  REQUIRE(cache.get_or_compile(p[0], [] { return fake_cubin(0); }).source == Source::kMemory);
  CubinCache fresh(CacheOptions{tmp.path().string(), false, room_for_three});
  REQUIRE_FALSE(fresh.load(p[0]).has_value());
  REQUIRE(fresh.load(p[5]) == fake_cubin(5));
  REQUIRE(fresh.stats().disk_hits == 1);
  REQUIRE(fresh.stats().corrupt == 0);
}

TEST_CASE("cache eviction: a disk hit refreshes an entry's place in the LRU order", "[cache]") {
  TempDir tmp;
  const std::vector<Preimage> p = preimages(4);
  const std::uint64_t room_for_three = 3 * entry_bytes(p[0]) + entry_bytes(p[0]) / 2;
  {
    CubinCache writer(CacheOptions{tmp.path().string(), false, room_for_three});
    for (int i = 0; i < 3; ++i) {
      writer.store(p[i], fake_cubin(i));
      set_age(writer.entry_path(p[i].key()), 1000 - i);
    }
    REQUIRE(writer.stats().stores == 3);
    REQUIRE(writer.stats().evictions == 0);
  }
  CubinCache cache(CacheOptions{tmp.path().string(), false, room_for_three});
  REQUIRE(cache.get_or_compile(p[0], [] { return fake_cubin(0); }).source == Source::kDisk);
  REQUIRE(cache.get_or_compile(p[3], [] { return fake_cubin(3); }).source == Source::kCompiled);
  const CacheStats stats = cache.stats();
  REQUIRE(stats.disk_hits == 1);
  REQUIRE(stats.compiles == 1);
  REQUIRE(stats.evictions == 1);
  REQUIRE(fs::exists(cache.entry_path(p[0].key())));  // used most recently but one
  REQUIRE_FALSE(fs::exists(cache.entry_path(p[1].key())));
  REQUIRE(fs::exists(cache.entry_path(p[2].key())));
  REQUIRE(fs::exists(cache.entry_path(p[3].key())));
}

TEST_CASE("cache eviction: the entry just stored stays even when it alone is too big", "[cache]") {
  TempDir tmp;
  const std::vector<Preimage> p = preimages(2);
  CubinCache cache(CacheOptions{tmp.path().string(), false, entry_bytes(p[0]) / 2});
  cache.store(p[0], fake_cubin(0));
  REQUIRE(fs::exists(cache.entry_path(p[0].key())));
  REQUIRE(cache.stats().evictions == 0);
  set_age(cache.entry_path(p[0].key()), 100);
  cache.store(p[1], fake_cubin(1));
  REQUIRE_FALSE(fs::exists(cache.entry_path(p[0].key())));
  REQUIRE(fs::exists(cache.entry_path(p[1].key())));
  REQUIRE(cache.stats().evictions == 1);
  REQUIRE(cache.stats().stores == 2);
}

TEST_CASE("cache eviction: stale staging files are removed, fresh ones kept", "[cache]") {
  TempDir tmp;
  const Preimage a = Preimage().add("source", "kernel A");
  CubinCache cache(CacheOptions{tmp.path().string()});
  const fs::path shard = cache.dir() / "ab";
  fs::create_directories(shard);
  const fs::path stale = shard / ".abcd.cubin.123.456.789.tmp";
  const fs::path fresh = shard / ".abce.cubin.123.456.789.tmp";
  std::ofstream(stale) << "left by a crashed process";
  std::ofstream(fresh) << "being written right now";
  set_age(stale, 2 * 3600);
  cache.store(a, fake_cubin(0));
  REQUIRE(cache.stats().stores == 1);
  REQUIRE_FALSE(fs::exists(stale));
  REQUIRE(fs::exists(fresh));
  REQUIRE(cache.stats().evictions == 0);
}
