// The cache on a full file system: a store that runs out of space is counted and logged, the
// binary is still returned, and no partial entry or staging file is left behind. Needs a small
// tmpfs, so it runs as root (or with CAP_SYS_ADMIN) and is skipped otherwise.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include "disk_cache.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace rt_moe::cache;

namespace {

// Writes `path` until the file system has no space left; returns the bytes written.
std::size_t fill(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  const std::string block(4096, 'f');
  std::size_t written = 0;
  for (;;) {
    const ssize_t n = ::write(fd, block.data(), block.size());
    if (n <= 0) {
      REQUIRE(errno == ENOSPC);
      break;
    }
    written += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return written;
}

std::string fake_cubin(std::size_t size) {
  std::string bytes =
      "\x7f"
      "ELF";
  for (std::size_t i = bytes.size(); i < size; ++i) bytes.push_back(static_cast<char>(i * 131));
  return bytes;
}

// Every regular file under `dir` (entries, staging files, anything).
std::vector<fs::path> files_under(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file()) files.push_back(it->path());
  }
  return files;
}

}  // namespace

TEST_CASE("cache: a full file system is a store failure, and the binary is still returned",
          "[cache]") {
  rt_moe::test::TmpfsMount fs_small("size=64k");
  if (!fs_small.mounted()) {
    RT_MOE_SKIP_TEST("cannot mount a tmpfs (" << fs_small.why()
                                              << "); the full-disk test needs root");
  }
  const fs::path dir = fs_small.path() / "cache";
  const fs::path filler = fs_small.path() / "filler";
  const std::string binary = fake_cubin(24 << 10);
  const Preimage preimage = Preimage().add("test", "full disk");
  int compiles = 0;
  auto compile = [&] {
    ++compiles;
    return binary;
  };

  // No space at all, or space for only part of the entry (the write fails half-way).
  const std::size_t spare = GENERATE(std::size_t(0), std::size_t(8192));
  INFO("spare bytes " << spare);
  {
    CubinCache cache(CacheOptions{dir.string()});
    REQUIRE(cache.persistent());
    const std::size_t filled = fill(filler);
    REQUIRE(filled > 0);
    if (spare > 0) fs::resize_file(filler, filled - spare);

    const Lookup first = cache.get_or_compile(preimage, compile);
    REQUIRE(first.binary != nullptr);
    CHECK(*first.binary == binary);
    CHECK(first.source == Source::kCompiled);
    CacheStats stats = cache.stats();
    CHECK(stats.store_failures == 1);
    CHECK(stats.stores == 0);

    // Nothing half-written stays: no entry, no staging file.
    const std::vector<fs::path> left = files_under(dir);
    INFO("left: " << (left.empty() ? std::string("nothing") : left.front().string()));
    CHECK(left.empty());

    const Lookup second = cache.get_or_compile(preimage, compile);
    CHECK(second.source == Source::kMemory);
    CHECK(*second.binary == binary);
    CHECK(compiles == 1);

    CubinCache other(CacheOptions{dir.string()});
    CHECK(!other.load(preimage).has_value());
    CHECK(other.stats().corrupt == 0);
  }

  // Once there is space again, the next process stores the entry.
  fs::remove(filler);
  CubinCache cache(CacheOptions{dir.string()});
  CHECK(cache.get_or_compile(preimage, compile).source == Source::kCompiled);
  CHECK(cache.stats().stores == 1);
  CHECK(cache.stats().store_failures == 0);
  CubinCache reader(CacheOptions{dir.string()});
  CHECK(reader.load(preimage) == binary);
}
