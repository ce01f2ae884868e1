#include "eviction.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <string>
#include <vector>

#include "file_ops.h"

namespace rt_moe::cache {
namespace fs = std::filesystem;
namespace {

struct EntryFile {
  fs::path path;
  std::uint64_t size = 0;
  timespec mtime{};
};

bool older(const EntryFile& a, const EntryFile& b) {
  if (a.mtime.tv_sec != b.mtime.tv_sec) return a.mtime.tv_sec < b.mtime.tv_sec;
  if (a.mtime.tv_nsec != b.mtime.tv_nsec) return a.mtime.tv_nsec < b.mtime.tv_nsec;
  return a.path < b.path;  // a stable order for equal times
}

}  // namespace

EvictionResult evict_lru(const fs::path& root, std::uint64_t max_bytes, const fs::path& keep) {
  EvictionResult result;
  std::vector<EntryFile> entries;
  const std::time_t stale_before = std::time(nullptr) - kStaleStagingAge.count();

  std::error_code ec;
  for (fs::directory_iterator shard(root, ec), end; !ec && shard != end; shard.increment(ec)) {
    std::error_code shard_ec;
    if (!shard->is_directory(shard_ec)) continue;
    for (fs::directory_iterator file(shard->path(), shard_ec); !shard_ec && file != end;
         file.increment(shard_ec)) {
      const fs::path& path = file->path();
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      const std::string name = path.filename().string();
      if (is_staging_name(name)) {
        if (st.st_mtim.tv_sec < stale_before && ::unlink(path.c_str()) == 0) {
          ++result.stale_staging_removed;
        }
      } else if (path.extension() == ".cubin") {
        entries.push_back({path, static_cast<std::uint64_t>(st.st_size), st.st_mtim});
        result.entry_bytes += static_cast<std::uint64_t>(st.st_size);
      }
    }
  }
  if (result.entry_bytes <= max_bytes) return result;

  std::sort(entries.begin(), entries.end(), older);
  std::uint64_t total = result.entry_bytes;
  for (const EntryFile& entry : entries) {
    if (total <= max_bytes) break;
    if (entry.path == keep) continue;
    if (::unlink(entry.path.c_str()) == 0) {
      ++result.evicted;
    } else if (errno != ENOENT) {
      continue;  // still there, still counted
    }            // ENOENT: another process evicted it first; either way it no longer counts.
    total -= entry.size;
  }
  return result;
}

}  // namespace rt_moe::cache
