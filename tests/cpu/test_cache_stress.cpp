// Processes killed mid-run: 16 processes race for the same 50 keys, 5 of them are SIGKILLed at
// random times, then restarted to completion. Afterwards the directory holds exactly one verified
// entry per key; whatever a killed process left behind (a staging file at most) is never taken for
// an entry, and the eviction scan removes it once it is older than kStaleStagingAge
// (docs/CACHE.md, "Size bound").
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../helpers/cache_child_keys.h"
#include "disk_cache.h"
#include "entry.h"
#include "eviction.h"
#include "file_ops.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace rt_moe::cache;
using rt_moe::cache::test::child_payload;
using rt_moe::cache::test::child_preimage;
using rt_moe::test::read_bytes;
using rt_moe::test::spawn;
using rt_moe::test::TempDir;
using rt_moe::test::wait_for;

namespace {

// Kills and reaps, when the test ends early, every child it did not wait for.
class ChildGuard {
 public:
  ~ChildGuard() {
    for (const pid_t pid : pids_) {
      if (::waitpid(pid, nullptr, WNOHANG) == 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  }
  pid_t add(pid_t pid) {
    pids_.push_back(pid);
    return pid;
  }

 private:
  std::vector<pid_t> pids_;
};

struct Listing {
  std::vector<fs::path> entries;  // "<key>.cubin"
  std::vector<fs::path> staging;  // ".<name>.<pid>.<thread>.<random>.tmp"
  std::vector<fs::path> other;
};

Listing list(const fs::path& dir) {
  Listing listing;
  for (const fs::directory_entry& file : fs::recursive_directory_iterator(dir)) {
    if (!file.is_regular_file()) continue;
    const std::string name = file.path().filename().string();
    if (is_staging_name(name)) {
      listing.staging.push_back(file.path());
    } else if (file.path().extension() == ".cubin" && name[0] != '.') {
      listing.entries.push_back(file.path());
    } else {
      listing.other.push_back(file.path());
    }
  }
  return listing;
}

}  // namespace

TEST_CASE("cache stress: processes SIGKILLed mid-run leave only verified entries", "[cache]") {
  constexpr int kProcesses = 16;
  constexpr int kKeys = 50;
  constexpr int kKills = 5;
  const std::string child = RT_MOE_TEST_HELPER_DIR "/rt_moe_cache_child";
  REQUIRE(fs::exists(child));
  TempDir tmp;
  const fs::path dir = tmp.path() / "cache";
  const fs::path go = tmp.path() / "go";
  const std::time_t run_start = std::time(nullptr);

  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 random(seed);
  auto args = [&](int id) {
    return std::vector<std::string>{
        child, "stress", dir.string(), std::to_string(kKeys), std::to_string(id), go.string()};
  };

  ChildGuard guard;
  std::vector<pid_t> children;
  for (int id = 0; id < kProcesses; ++id) children.push_back(guard.add(spawn(args(id))));

  // kKills kill times 10-200 ms after the start; each kills a random child still running.
  std::vector<int> kill_ms;
  std::uniform_int_distribution<int> at_ms(10, 200);
  for (int i = 0; i < kKills; ++i) kill_ms.push_back(at_ms(random));
  std::sort(kill_ms.begin(), kill_ms.end());
  std::map<int, int> statuses;  // id -> waitpid status, once reaped
  std::set<int> killed;

  std::ofstream(go) << "go";
  const auto start = std::chrono::steady_clock::now();
  for (const int ms : kill_ms) {
    std::this_thread::sleep_until(start + std::chrono::milliseconds(ms));
    std::vector<int> ids(kProcesses);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), random);
    for (const int id : ids) {
      if (killed.count(id) != 0 || statuses.count(id) != 0) continue;
      int status = 0;
      const pid_t reaped = ::waitpid(children[id], &status, WNOHANG);
      REQUIRE(reaped >= 0);
      if (reaped == children[id]) {
        statuses[id] = status;  // finished already
        continue;
      }
      REQUIRE(::kill(children[id], SIGKILL) == 0);
      killed.insert(id);
      break;
    }
  }
  for (int id = 0; id < kProcesses; ++id) {
    if (statuses.count(id) == 0) statuses[id] = wait_for(children[id]);
    const int status = statuses[id];
    INFO("child " << id << " status " << status);
    if (killed.count(id) != 0) {
      REQUIRE(WIFSIGNALED(status));
      REQUIRE(WTERMSIG(status) == SIGKILL);
    } else {
      REQUIRE(WIFEXITED(status));
      REQUIRE(WEXITSTATUS(status) == 0);
    }
  }
  // Each child pauses 4-6 ms after each of its 50 keys, so it runs well past the last kill time.
  INFO(killed.size() << " children killed mid-run");
  REQUIRE(!killed.empty());
  if (killed.size() < kKills) WARN("only " << killed.size() << " children were still running");

  // What the killed processes left, before they are restarted.
  const Listing after_kills = list(dir);
  CHECK(after_kills.other.empty());
  CHECK(after_kills.staging.size() <= killed.size());  // one store at a time per process

  std::map<int, pid_t> restarted;
  for (const int id : killed) restarted[id] = guard.add(spawn(args(id)));
  for (const auto& [id, pid] : restarted) {
    const int status = wait_for(pid);
    INFO("restarted child " << id << " status " << status);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
  }

  // Exactly one entry per key, each one valid, each one the right binary.
  const Listing listing = list(dir);
  INFO("staging files left: " << listing.staging.size());
  REQUIRE(listing.other.empty());
  REQUIRE(listing.entries.size() == kKeys);
  for (const fs::path& entry : listing.entries) {
    INFO(entry);
    CHECK(decode_entry(read_bytes(entry)).status == EntryStatus::kOk);
  }
  CubinCache fresh(CacheOptions{dir.string()});
  for (int key = 0; key < kKeys; ++key) {
    INFO("key " << key);
    REQUIRE(fresh.load(child_preimage(key)) == child_payload(key));
  }
  CHECK(fresh.stats().disk_hits == kKeys);
  CHECK(fresh.stats().corrupt == 0);

  // Staging files left by a killed process are from this run, and never entries. So that the
  // cleanup below always has one to remove, add what a process killed half-way through writing
  // key 0 leaves behind.
  for (const fs::path& staging : listing.staging) {
    struct stat st {};
    REQUIRE(::stat(staging.c_str(), &st) == 0);
    CHECK(st.st_mtime >= run_start);
  }
  const fs::path entry0 = fresh.entry_path(child_preimage(0).key());
  const std::string whole = encode_entry(child_preimage(0).bytes(), child_payload(0));
  const fs::path half = entry0.parent_path() / staging_name(entry0.filename().string());
  std::ofstream(half, std::ios::binary) << whole.substr(0, whole.size() / 2);
  REQUIRE(fresh.load(child_preimage(0)) == child_payload(0));

  // Once older than kStaleStagingAge, the scan after the next store removes them all.
  std::vector<fs::path> staging = list(dir).staging;
  REQUIRE(!staging.empty());
  const timespec old{std::time(nullptr) - kStaleStagingAge.count() - 60, 0};
  const timespec times[2] = {old, old};
  for (const fs::path& path : staging) REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
  fresh.store(Preimage().add("test", "cache_stress").add("key", "trigger"), child_payload(kKeys));
  CHECK(fresh.stats().stores == 1);
  const Listing cleaned = list(dir);
  CHECK(cleaned.staging.empty());
  CHECK(cleaned.other.empty());
  CHECK(cleaned.entries.size() == kKeys + 1);
  for (int key = 0; key < kKeys; ++key) {
    INFO("key " << key);
    CHECK(fresh.load(child_preimage(key)) == child_payload(key));
  }
  CHECK(fresh.stats().corrupt == 0);
}
