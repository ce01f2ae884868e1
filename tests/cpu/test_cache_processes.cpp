// Processes racing on one cache directory: each key ends up as exactly one valid entry, and no
// staging file is left behind.
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../helpers/cache_child_keys.h"
#include "disk_cache.h"

extern char** environ;

namespace fs = std::filesystem;
using namespace rt_moe::cache;
using rt_moe::cache::test::child_payload;
using rt_moe::cache::test::child_preimage;

namespace {

class TempDir {
 public:
  TempDir() {
    std::string path = (fs::temp_directory_path() / "rt_moe_cache_XXXXXX").string();
    REQUIRE(::mkdtemp(path.data()) != nullptr);
    path_ = path;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

pid_t spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  REQUIRE(rc == 0);
  return pid;
}

}  // namespace

TEST_CASE("cache: processes racing on one directory leave one valid entry per key", "[cache]") {
  constexpr int kProcesses = 8;
  constexpr int kKeys = 20;
  const std::string child = RT_MOE_TEST_HELPER_DIR "/rt_moe_cache_child";
  REQUIRE(fs::exists(child));
  TempDir tmp;
  const fs::path dir = tmp.path() / "cache";
  const fs::path go = tmp.path() / "go";

  std::vector<pid_t> children;
  for (int id = 0; id < kProcesses; ++id) {
    children.push_back(
        spawn({child, dir.string(), std::to_string(kKeys), std::to_string(id), go.string()}));
  }
  std::ofstream(go) << "go";
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    INFO("child " << pid << " status " << status);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
  }

  int entries = 0;
  std::string unexpected;  // staging or probe files left behind
  for (const fs::directory_entry& file : fs::recursive_directory_iterator(dir)) {
    if (!file.is_regular_file()) continue;
    if (file.path().extension() == ".cubin" && file.path().filename().string()[0] != '.') {
      ++entries;
    } else {
      unexpected += file.path().string() + " ";
    }
  }
  REQUIRE(entries == kKeys);
  INFO("unexpected files: " << unexpected);
  REQUIRE(unexpected.empty());

  CubinCache fresh(CacheOptions{dir.string()});
  for (int key = 0; key < kKeys; ++key) {
    INFO("key " << key);
    REQUIRE(fresh.load(child_preimage(key)) == child_payload(key));
  }
  const CacheStats stats = fresh.stats();
  REQUIRE(stats.disk_hits == kKeys);
  REQUIRE(stats.corrupt == 0);
}
