// LRU bound on the cache directory. An entry's mtime is its last use (set when published,
// refreshed on every disk hit), so the oldest mtimes go first.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>

namespace rt_moe::cache {

// Staging files older than this were left by a process that died mid-store.
inline constexpr std::chrono::seconds kStaleStagingAge{3600};

struct EvictionResult {
  std::uint64_t entry_bytes = 0;  // total before eviction
  std::uint64_t evicted = 0;
  std::uint64_t stale_staging_removed = 0;
};

// Scans `root`/<shard>/ for entries ("*.cubin") and, while their total size exceeds `max_bytes`,
// removes the least recently used, never `keep`. Also removes stale staging files. Never throws;
// an entry that vanishes under a concurrent scan is simply skipped.
EvictionResult evict_lru(const std::filesystem::path& root, std::uint64_t max_bytes,
                         const std::filesystem::path& keep);

}  // namespace rt_moe::cache
