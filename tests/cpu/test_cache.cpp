// The cubin cache on one directory: memory and disk hits, misses on any changed input, recovery
// from damaged entries, and degradation when the directory cannot be used. Every test asserts the
// hit and miss counts.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>

#include "base/env.h"
#include "disk_cache.h"
#include "entry.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace rt_moe::cache;
using rt_moe::test::read_bytes;
using rt_moe::test::TempDir;
using rt_moe::test::Warnings;
using rt_moe::test::write_bytes;

namespace {

// A stand-in for a cubin: the ELF magic, then bytes that depend on `tag`.
std::string fake_cubin(std::string_view tag, std::size_t size = 3000) {
  std::string bytes(kElfMagic);
  std::mt19937 random(static_cast<unsigned>(std::hash<std::string_view>{}(tag)));
  while (bytes.size() < size) bytes.push_back(static_cast<char>(random()));
  return bytes;
}

// A compile function that counts its calls.
struct FakeCompiler {
  std::string tag;
  int calls = 0;
  std::string operator()() {
    ++calls;
    return fake_cubin(tag);
  }
};

CacheOptions options_for(const fs::path& dir) { return CacheOptions{dir.string()}; }

}  // namespace

TEST_CASE("cache: compile, then a memory hit, then a disk hit in a new instance", "[cache]") {
  TempDir tmp;
  const Preimage preimage = Preimage().add("source", "kernel A").add("arch", "sm_90a");
  FakeCompiler compile{"A"};

  CubinCache first(options_for(tmp.path()));
  REQUIRE(first.persistent());
  const Lookup compiled = first.get_or_compile(preimage, std::ref(compile));
  REQUIRE(compiled.source == Source::kCompiled);
  REQUIRE(*compiled.binary == fake_cubin("A"));
  CacheStats stats = first.stats();
  REQUIRE(stats.misses == 1);
  REQUIRE(stats.compiles == 1);
  REQUIRE(stats.stores == 1);
  REQUIRE(stats.memory_hits == 0);
  REQUIRE(stats.disk_hits == 0);

  const Lookup memory = first.get_or_compile(preimage, std::ref(compile));
  REQUIRE(memory.source == Source::kMemory);
  REQUIRE(memory.binary == compiled.binary);
  stats = first.stats();
  REQUIRE(stats.memory_hits == 1);
  REQUIRE(stats.compiles == 1);
  REQUIRE(stats.misses == 1);

  // The documented layout: <dir>/v<schema>/<first 2 hex>/<32 hex>.cubin.
  const std::string hex = preimage.key().hex();
  const fs::path entry =
      tmp.path() / ("v" + std::to_string(kSchemaVersion)) / hex.substr(0, 2) / (hex + ".cubin");
  REQUIRE(first.entry_path(preimage.key()) == entry);
  REQUIRE(fs::file_size(entry) == kEntryHeaderBytes + preimage.bytes().size() + 3000);

  CubinCache second(options_for(tmp.path()));
  const Lookup disk = second.get_or_compile(preimage, std::ref(compile));
  REQUIRE(disk.source == Source::kDisk);
  REQUIRE(*disk.binary == *compiled.binary);
  stats = second.stats();
  REQUIRE(stats.disk_hits == 1);
  REQUIRE(stats.compiles == 0);
  REQUIRE(stats.misses == 0);
  REQUIRE(stats.stores == 0);
  REQUIRE(second.get_or_compile(preimage, std::ref(compile)).source == Source::kMemory);
  REQUIRE(compile.calls == 1);

  CubinCache third(options_for(tmp.path()));
  REQUIRE(third.load(preimage) == fake_cubin("A"));
  REQUIRE(third.stats().disk_hits == 1);
}

TEST_CASE("cache: any changed input of the preimage is a miss", "[cache]") {
  TempDir tmp;
  auto make = [](std::string_view source, std::string_view options, std::string_view arch,
                 std::string_view nvrtc) {
    return Preimage()
        .add("source", source)
        .add("header:moe.cuh", "template <int M> struct Tile {};")
        .add("options", options)
        .add("arch", arch)
        .add("nvrtc", nvrtc);
  };
  const Preimage base = make("kernel<128>", "-O3 -std=c++17", "sm_90a", "12.8");
  {
    CubinCache warm(options_for(tmp.path()));
    warm.get_or_compile(base, FakeCompiler{"base"});
    REQUIRE(warm.stats().compiles == 1);
  }
  const Preimage changed[] = {
      make("kernel<256>", "-O3 -std=c++17", "sm_90a", "12.8"),            // source
      make("kernel<128>", "-O3 -std=c++17 -lineinfo", "sm_90a", "12.8"),  // an option
      make("kernel<128>", "-O3 -std=c++17", "sm_90", "12.8"),             // arch
      make("kernel<128>", "-O3 -std=c++17", "sm_90a", "13.0"),            // NVRTC version
      Preimage(base).add("header:extra.cuh", "// one more header"),       // a header
  };
  for (const Preimage& preimage : changed) {
    CubinCache cache(options_for(tmp.path()));
    FakeCompiler compile{"changed"};
    REQUIRE(cache.get_or_compile(preimage, std::ref(compile)).source == Source::kCompiled);
    const CacheStats stats = cache.stats();
    REQUIRE(stats.misses == 1);
    REQUIRE(stats.compiles == 1);
    REQUIRE(stats.disk_hits == 0);
    REQUIRE(stats.corrupt == 0);
  }
  CubinCache cache(options_for(tmp.path()));
  REQUIRE(cache.get_or_compile(base, FakeCompiler{"base"}).source == Source::kDisk);
  REQUIRE(cache.stats().compiles == 0);
}

TEST_CASE("cache: a damaged entry is detected, removed and recompiled", "[cache]") {
  TempDir tmp;
  const Preimage a = Preimage().add("source", "kernel A");
  const Preimage b = Preimage().add("source", "kernel B");
  fs::path path_a;
  fs::path path_b;
  {
    CubinCache writer(options_for(tmp.path()));
    writer.get_or_compile(a, FakeCompiler{"A"});
    writer.get_or_compile(b, FakeCompiler{"B"});
    REQUIRE(writer.stats().stores == 2);
    path_a = writer.entry_path(a.key());
    path_b = writer.entry_path(b.key());
  }
  const std::string good = read_bytes(path_a);

  SECTION("truncated") { fs::resize_file(path_a, good.size() / 2); }
  SECTION("truncated inside the header") { fs::resize_file(path_a, 10); }
  SECTION("empty") { fs::resize_file(path_a, 0); }
  SECTION("zeroed") { write_bytes(path_a, std::string(good.size(), '\0')); }
  SECTION("garbage") {
    std::string garbage = fake_cubin("garbage", good.size());
    write_bytes(path_a, garbage);
  }
  SECTION("one payload byte flipped") {
    std::string bytes = good;
    bytes.back() ^= 0x01;
    write_bytes(path_a, bytes);
  }
  SECTION("one preimage byte flipped") {
    std::string bytes = good;
    bytes[kEntryHeaderBytes + 3] ^= 0x40;
    write_bytes(path_a, bytes);
  }
  SECTION("longer than its header says") { write_bytes(path_a, good + "tail"); }
  SECTION("another key's entry copied over it") {
    fs::copy_file(path_b, path_a, fs::copy_options::overwrite_existing);
  }

  Warnings warnings;
  CubinCache reader(options_for(tmp.path()));
  FakeCompiler compile{"A"};
  const Lookup lookup = reader.get_or_compile(a, std::ref(compile));
  REQUIRE(lookup.source == Source::kCompiled);
  REQUIRE(*lookup.binary == fake_cubin("A"));
  const CacheStats stats = reader.stats();
  REQUIRE(stats.corrupt == 1);
  REQUIRE(stats.misses == 1);
  REQUIRE(stats.compiles == 1);
  REQUIRE(stats.disk_hits == 0);
  REQUIRE(stats.stores == 1);  // the bad entry was removed, so the new one could be published
  REQUIRE(warnings.count() == 1);
  REQUIRE(read_bytes(path_a) == good);

  CubinCache fresh(options_for(tmp.path()));
  REQUIRE(fresh.get_or_compile(a, FakeCompiler{"A"}).source == Source::kDisk);
  REQUIRE(fresh.load(b) == fake_cubin("B"));
  REQUIRE(fresh.stats().corrupt == 0);
  REQUIRE(fresh.stats().compiles == 0);
  REQUIRE(fresh.stats().disk_hits == 2);
}

TEST_CASE("cache: load() of a damaged entry is a miss that removes it", "[cache]") {
  TempDir tmp;
  const Preimage a = Preimage().add("source", "kernel A");
  CubinCache cache(options_for(tmp.path()));
  cache.store(a, fake_cubin("A"));
  REQUIRE(cache.stats().stores == 1);
  fs::resize_file(cache.entry_path(a.key()), 100);
  REQUIRE_FALSE(cache.load(a).has_value());
  REQUIRE(cache.stats().corrupt == 1);
  REQUIRE_FALSE(fs::exists(cache.entry_path(a.key())));
  REQUIRE_FALSE(cache.load(a).has_value());  // now simply absent
  REQUIRE(cache.stats().corrupt == 1);
  REQUIRE(cache.stats().disk_hits == 0);
}

TEST_CASE("cache: an unusable directory degrades to memory only with one warning", "[cache]") {
  TempDir tmp;
  write_bytes(tmp.path() / "file", "in the way");
  std::string dir;
  SECTION("a file in the way of a parent") { dir = (tmp.path() / "file" / "sub").string(); }
  SECTION("the directory is a file") { dir = (tmp.path() / "file").string(); }
  SECTION("no directory at all") { dir = ""; }

  Warnings warnings;
  CubinCache cache(CacheOptions{dir});
  REQUIRE_FALSE(cache.persistent());
  const Preimage a = Preimage().add("source", "kernel A");
  const Preimage b = Preimage().add("source", "kernel B");
  REQUIRE(cache.get_or_compile(a, FakeCompiler{"A"}).source == Source::kCompiled);
  REQUIRE(cache.get_or_compile(a, FakeCompiler{"A"}).source == Source::kMemory);
  REQUIRE(*cache.get_or_compile(b, FakeCompiler{"B"}).binary == fake_cubin("B"));
  cache.store(a, fake_cubin("A"));
  REQUIRE_FALSE(cache.load(a).has_value());
  const CacheStats stats = cache.stats();
  REQUIRE(stats.compiles == 2);
  REQUIRE(stats.misses == 2);
  REQUIRE(stats.memory_hits == 1);
  REQUIRE(stats.stores == 0);
  REQUIRE(stats.store_failures == 0);
  REQUIRE(warnings.count() == 1);
  REQUIRE(fs::is_regular_file(tmp.path() / "file"));
}

TEST_CASE("cache: a read-only directory degrades to memory only", "[cache]") {
  // Permission bits do not stop root's writes; a read-only file system does.
  std::optional<rt_moe::test::TmpfsMount> read_only;
  std::optional<TempDir> tmp;
  fs::path dir;
  if (::geteuid() == 0) {
    read_only.emplace("size=64k", MS_RDONLY);
    if (!read_only->mounted()) {
      RT_MOE_SKIP_TEST(
          "running as root, where permission bits do not stop writes, and cannot "
          "mount a read-only tmpfs ("
          << read_only->why() << ")");
    }
    dir = read_only->path();
  } else {
    tmp.emplace();
    dir = tmp->path() / "ro";
    fs::create_directories(dir);
    fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  }
  Warnings warnings;
  CubinCache cache(options_for(dir));
  REQUIRE_FALSE(cache.persistent());
  const Preimage a = Preimage().add("source", "kernel A");
  REQUIRE(cache.get_or_compile(a, FakeCompiler{"A"}).source == Source::kCompiled);
  REQUIRE(cache.get_or_compile(a, FakeCompiler{"A"}).source == Source::kMemory);
  REQUIRE(cache.stats().compiles == 1);
  REQUIRE(warnings.count() == 1);
  if (tmp) fs::permissions(dir, fs::perms::owner_all);
}

TEST_CASE("cache: disabled writes nothing to disk", "[cache]") {
  TempDir tmp;
  Warnings warnings;
  CubinCache cache(CacheOptions{tmp.path().string(), /*disabled=*/true});
  REQUIRE_FALSE(cache.persistent());
  const Preimage a = Preimage().add("source", "kernel A");
  REQUIRE(cache.get_or_compile(a, FakeCompiler{"A"}).source == Source::kCompiled);
  REQUIRE(cache.get_or_compile(a, FakeCompiler{"A"}).source == Source::kMemory);
  cache.store(a, fake_cubin("A"));
  REQUIRE(fs::is_empty(tmp.path()));
  REQUIRE(cache.stats().compiles == 1);
  REQUIRE(cache.stats().memory_hits == 1);
  REQUIRE(cache.stats().stores == 0);
  REQUIRE(warnings.count() == 0);
}

TEST_CASE("cache: a directory deleted mid-run is recreated, a blocked one is a store failure",
          "[cache]") {
  TempDir tmp;
  const fs::path dir = tmp.path() / "cache";
  CubinCache cache(options_for(dir));
  REQUIRE(cache.persistent());
  fs::remove_all(dir);

  const Preimage a = Preimage().add("source", "kernel A");
  REQUIRE(*cache.get_or_compile(a, FakeCompiler{"A"}).binary == fake_cubin("A"));
  REQUIRE(cache.stats().stores == 1);
  REQUIRE(cache.stats().store_failures == 0);
  REQUIRE(fs::exists(cache.entry_path(a.key())));
  {
    CubinCache fresh(options_for(dir));
    REQUIRE(fresh.get_or_compile(a, FakeCompiler{"A"}).source == Source::kDisk);
  }

  // Now a regular file where the directory was: the store fails, the binary is still returned.
  fs::remove_all(dir);
  write_bytes(dir, "in the way");
  Warnings warnings;
  const Preimage b = Preimage().add("source", "kernel B");
  const Preimage c = Preimage().add("source", "kernel C");
  REQUIRE(*cache.get_or_compile(b, FakeCompiler{"B"}).binary == fake_cubin("B"));
  REQUIRE(*cache.get_or_compile(c, FakeCompiler{"C"}).binary == fake_cubin("C"));
  const CacheStats stats = cache.stats();
  REQUIRE(stats.store_failures == 2);
  REQUIRE(stats.stores == 1);
  REQUIRE(stats.compiles == 3);
  REQUIRE(warnings.count() == 1);  // the first failure warns, later ones go to debug
  REQUIRE(cache.get_or_compile(b, FakeCompiler{"B"}).source == Source::kMemory);
}

TEST_CASE("cache: options come from the environment configuration", "[cache]") {
  const CacheOptions options = options_from_env();
  const rt_moe::EnvConfig& config = rt_moe::env();
  REQUIRE(options.dir == config.cache_dir);
  REQUIRE(options.disabled == config.cache_disabled);
  REQUIRE(options.max_bytes == config.cache_max_bytes);
}
