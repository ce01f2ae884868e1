// The cubin cache: an in-process map over a crash-safe directory of entries.
//
// Lookup order: memory -> disk (verified) -> compile. In one process each key is compiled once,
// even when many threads ask for it at once. Entries are published atomically (written to a staging
// file, fsync'ed, then linked into place; the loser of a race between processes keeps the winner's
// entry), verified on load (size, checksum, ELF magic, stored preimage equal to the asked one), and
// a bad entry is logged, removed and recompiled, never loaded. The directory is bounded in size
// with LRU eviction (an entry's mtime is refreshed on every disk hit). A directory that cannot be
// used degrades the cache to memory only, with one warning.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "key.h"

namespace rt_moe::cache {

struct CacheOptions {
  std::string dir;                          // empty: memory only
  bool disabled = false;                    // true: no disk at all (RT_MOE_DISABLE_CACHE=1)
  std::uint64_t max_bytes = 2048ull << 20;  // bound on the directory's entry bytes
};

// Options from the environment (RT_MOE_CACHE_DIR, XDG_CACHE_HOME, HOME, RT_MOE_DISABLE_CACHE,
// RT_MOE_CACHE_MAX_MB), read once.
CacheOptions options_from_env();

struct CacheStats {
  std::uint64_t memory_hits = 0;
  std::uint64_t disk_hits = 0;
  std::uint64_t misses = 0;          // neither in memory nor (validly) on disk
  std::uint64_t compiles = 0;        // calls of the compile function
  std::uint64_t corrupt = 0;         // entries found bad on load and removed
  std::uint64_t stores = 0;          // entries published by this process
  std::uint64_t store_failures = 0;  // entries that could not be written (logged)
  std::uint64_t evictions = 0;
};

enum class Source { kMemory, kDisk, kCompiled };

struct Lookup {
  std::shared_ptr<const std::string> binary;
  Source source = Source::kCompiled;
};

class CubinCache {
 public:
  explicit CubinCache(CacheOptions options);
  CubinCache(const CubinCache&) = delete;
  CubinCache& operator=(const CubinCache&) = delete;

  // The binary for `preimage`. `compile` is called only on a miss, at most once per key at a time
  // in this process; its result must be a cubin (ELF) and is published to disk. An exception from
  // `compile` propagates to every waiter and nothing is cached, so a later call tries again.
  Lookup get_or_compile(const Preimage& preimage, const std::function<std::string()>& compile);

  // Disk only, verified: the stored binary, or nullopt (a bad entry is removed and counted).
  std::optional<std::string> load(const Preimage& preimage);
  // Publishes an entry atomically; failures are logged and counted, never thrown.
  void store(const Preimage& preimage, std::string_view binary);

  CacheStats stats() const;
  bool persistent() const;  // false when disabled or degraded to memory only
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path entry_path(const Key& key) const;

 private:
  struct Slot;
  // Disk, else compile; no memory map, no store. Throws what `compile` throws.
  Lookup resolve(const Preimage& preimage, const std::function<std::string()>& compile);
  void evict_if_needed(const std::filesystem::path& keep);
  void count(std::uint64_t CacheStats::*counter, std::uint64_t n = 1);
  void store_failed(const std::filesystem::path& path, const std::string& why);

  std::filesystem::path dir_;  // <options.dir>/v<kSchemaVersion>
  bool persistent_ = false;    // set once by the constructor
  std::uint64_t max_bytes_ = 0;
  // Guards slots_, stats_ and store_failure_warned_; never held while compiling or doing disk I/O.
  mutable std::mutex mutex_;
  std::unordered_map<Key, std::shared_ptr<Slot>, KeyHash> slots_;
  CacheStats stats_;
  bool store_failure_warned_ = false;
  std::mutex eviction_mutex_;  // one directory scan at a time in this process
};

}  // namespace rt_moe::cache
