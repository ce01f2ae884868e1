#include "disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>

#include "base/env.h"
#include "base/log.h"
#include "entry.h"
#include "eviction.h"
#include "file_ops.h"
#include "rt_moe/error.h"

namespace rt_moe::cache {
namespace fs = std::filesystem;

// One key's result in this process. The first caller for a key owns the slot and fills it;
// everyone else waits on the shared future, so a key is compiled once at a time, and a compile
// error reaches every waiter of that attempt.
struct CubinCache::Slot {
  std::string preimage;  // compared by every later caller: a key collision must not share a binary
  std::shared_future<std::shared_ptr<const std::string>> result;
};

namespace {

using Clock = std::chrono::steady_clock;

long long micros_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
}

std::string errno_text(int error) { return std::strerror(error); }

// Empty when `dir` can hold entries; otherwise what is wrong with it. Creating and removing a file
// is the only test that holds for read-only mounts, ACLs and root alike.
std::string unusable_reason(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return "cannot create it: " + ec.message();
  if (!fs::is_directory(dir, ec)) return "not a directory";
  const fs::path probe = dir / staging_name("probe");
  UniqueFd fd(::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) return "not writable: " + errno_text(errno);
  fd.close();
  ::unlink(probe.c_str());
  return {};
}

}  // namespace

CacheOptions options_from_env() {
  const EnvConfig& config = env();
  CacheOptions options;
  options.dir = config.cache_dir;
  options.disabled = config.cache_disabled;
  options.max_bytes = config.cache_max_bytes;
  return options;
}

CubinCache::CubinCache(CacheOptions options) : max_bytes_(options.max_bytes) {
  if (!options.dir.empty()) dir_ = fs::path(options.dir) / ("v" + std::to_string(kSchemaVersion));
  if (options.disabled) {
    log().debug("cache: disabled; kernels are cached in memory only");
    return;
  }
  if (options.dir.empty()) {
    log().warn(
        "cache: no cache directory (set RT_MOE_CACHE_DIR or HOME); kernels are cached in "
        "memory only");
    return;
  }
  if (const std::string reason = unusable_reason(dir_); !reason.empty()) {
    log().warn("cache: cannot use {} ({}); kernels are cached in memory only", dir_.string(),
               reason);
    return;
  }
  persistent_ = true;
  log().debug("cache: {} (max {} bytes)", dir_.string(), max_bytes_);
}

fs::path CubinCache::entry_path(const Key& key) const {
  const std::string hex = key.hex();
  return dir_ / hex.substr(0, 2) / (hex + ".cubin");
}

bool CubinCache::persistent() const { return persistent_; }

CacheStats CubinCache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CubinCache::count(std::uint64_t CacheStats::*counter, std::uint64_t n) {
  std::lock_guard lock(mutex_);
  stats_.*counter += n;
}

Lookup CubinCache::get_or_compile(const Preimage& preimage,
                                  const std::function<std::string()>& compile) {
  const Key key = preimage.key();
  std::shared_ptr<Slot> slot;
  std::promise<std::shared_ptr<const std::string>> promise;
  bool owner = false;
  {
    std::lock_guard lock(mutex_);
    if (auto it = slots_.find(key); it != slots_.end()) {
      slot = it->second;
    } else {
      slot = std::make_shared<Slot>();
      slot->preimage = preimage.bytes();
      slot->result = promise.get_future().share();
      slots_.emplace(key, slot);
      owner = true;
    }
  }

  if (!owner) {
    if (slot->preimage != preimage.bytes()) {
      // A 128-bit collision in memory: serve this preimage without the map rather than hand out
      // the other preimage's binary.
      log().warn("cache: two preimages share key {}; the second is not cached in memory",
                 key.hex());
      Lookup lookup = resolve(preimage, compile);
      if (lookup.source == Source::kCompiled) store(preimage, *lookup.binary);
      return lookup;
    }
    std::shared_ptr<const std::string> binary = slot->result.get();  // rethrows a compile error
    count(&CacheStats::memory_hits);
    return {std::move(binary), Source::kMemory};
  }

  Lookup lookup;
  try {
    lookup = resolve(preimage, compile);
  } catch (...) {
    {
      std::lock_guard lock(mutex_);
      if (auto it = slots_.find(key); it != slots_.end() && it->second == slot) slots_.erase(it);
    }
    promise.set_exception(std::current_exception());
    throw;
  }
  promise.set_value(lookup.binary);  // waiters go on while this thread writes the entry
  if (lookup.source == Source::kCompiled) store(preimage, *lookup.binary);
  return lookup;
}

Lookup CubinCache::resolve(const Preimage& preimage, const std::function<std::string()>& compile) {
  if (std::optional<std::string> disk = load(preimage)) {
    return {std::make_shared<const std::string>(std::move(*disk)), Source::kDisk};
  }
  {
    std::lock_guard lock(mutex_);
    ++stats_.misses;
    ++stats_.compiles;
  }
  const auto start = Clock::now();
  std::string binary = compile();
  if (!is_elf(binary)) {
    throw Error(ErrorCode::kCache, "cache: the compile function for key " + preimage.key().hex() +
                                       " returned " + std::to_string(binary.size()) +
                                       " bytes that are not an ELF image (cubin)");
  }
  log().debug("cache: compiled {} ({} bytes, {} us)", preimage.key().hex(), binary.size(),
              micros_since(start));
  return {std::make_shared<const std::string>(std::move(binary)), Source::kCompiled};
}

std::optional<std::string> CubinCache::load(const Preimage& preimage) {
  if (!persistent_) return std::nullopt;
  const auto start = Clock::now();
  const Key key = preimage.key();
  const fs::path path = entry_path(key);
  FileBytes file = read_file(path);
  if (file.error == ENOENT || file.error == ENOTDIR) return std::nullopt;
  if (file.error != 0) {
    log().debug("cache: cannot read {}: {}", path.string(), errno_text(file.error));
    return std::nullopt;
  }

  const DecodedEntry entry = decode_entry(file.bytes);
  std::string problem;
  if (entry.status != EntryStatus::kOk) {
    problem = to_string(entry.status);
  } else if (entry.preimage != preimage.bytes()) {
    // Either a true XXH3-128 collision or a file copied to the wrong name. Both are misses; the
    // entry is removed so that the asked preimage's binary replaces it (the collision partner
    // is recompiled if it is asked for again).
    problem = key_of(entry.preimage) == key ? "another preimage with the same key"
                                            : "entry of another key";
  }
  if (!problem.empty()) {
    log().warn("cache: removing bad entry {} ({}, {} bytes)", path.string(), problem,
               file.bytes.size());
    remove_if_same(path, file.device, file.inode);
    count(&CacheStats::corrupt);
    return std::nullopt;
  }

  // The mtime is the LRU clock; a failure only makes this entry look older than it is.
  if (::futimens(file.fd.get(), nullptr) != 0) {
    log().debug("cache: cannot refresh the mtime of {}: {}", path.string(), errno_text(errno));
  }
  count(&CacheStats::disk_hits);
  const std::size_t payload_offset =
      static_cast<std::size_t>(entry.payload.data() - file.bytes.data());
  file.bytes.erase(0, payload_offset);
  log().debug("cache: disk hit {} ({} bytes, {} us)", key.hex(), file.bytes.size(),
              micros_since(start));
  return std::move(file.bytes);
}

void CubinCache::store(const Preimage& preimage, std::string_view binary) {
  if (!persistent_) return;
  const auto start = Clock::now();
  const Key key = preimage.key();
  const fs::path path = entry_path(key);
  try {
    if (!is_elf(binary)) return store_failed(path, "the binary is not an ELF image");
    const std::string bytes = encode_entry(preimage.bytes(), binary);
    const PublishResult result = publish(path.parent_path(), path.filename().string(), bytes);
    switch (result.outcome) {
      case Published::kYes:
        count(&CacheStats::stores);
        log().debug("cache: stored {} ({} bytes, {} us)", key.hex(), bytes.size(),
                    micros_since(start));
        evict_if_needed(path);
        break;
      case Published::kLostRace:
        log().debug("cache: {} was published by another process first; keeping it", key.hex());
        break;
      case Published::kFailed:
        store_failed(path, std::string(result.step) + ": " + errno_text(result.error));
        break;
    }
  } catch (const std::exception& e) {  // allocation or path errors: still never thrown
    store_failed(path, e.what());
  }
}

void CubinCache::store_failed(const fs::path& path, const std::string& why) {
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    ++stats_.store_failures;
    first = !store_failure_warned_;
    store_failure_warned_ = true;
  }
  if (first) {
    log().warn(
        "cache: cannot store {} ({}); the kernel stays in memory (further store failures "
        "are logged at debug level)",
        path.string(), why);
  } else {
    log().debug("cache: cannot store {} ({})", path.string(), why);
  }
}

void CubinCache::evict_if_needed(const fs::path& keep) {
  std::lock_guard lock(eviction_mutex_);
  const EvictionResult result = evict_lru(dir_, max_bytes_, keep);
  if (result.evicted > 0) {
    count(&CacheStats::evictions, result.evicted);
    log().debug("cache: evicted {} entries ({} bytes of entries, bound {} bytes)", result.evicted,
                result.entry_bytes, max_bytes_);
  }
  if (result.stale_staging_removed > 0) {
    log().debug("cache: removed {} stale staging files", result.stale_staging_removed);
  }
}

}  // namespace rt_moe::cache
