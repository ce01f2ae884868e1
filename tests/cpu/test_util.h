// What the CPU tests share: a temporary directory, child processes started without a shell (and
// children raced against each other), whole files read and written, and the rt_moe logger's
// warnings collected.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <spdlog/sinks/base_sink.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/log.h"

extern char** environ;

// Ends the test case here, to be reported as skipped: ctest marks a CPU test whose output holds
// this marker "Skipped" (SKIP_REGULAR_EXPRESSION, tests/CMakeLists.txt), never "Passed"; a run of
// the whole binary goes on with the next case and shows the warning.
#define RT_MOE_SKIP_TEST(message)             \
  do {                                        \
    WARN("rt_moe test skipped: " << message); \
    return;                                   \
  } while (false)

namespace rt_moe::test {

// A fresh directory under the system's temporary directory, removed with all it holds. Owner
// permissions on it are restored first, so a test may take them away.
class TempDir {
 public:
  TempDir() {
    std::string path = (std::filesystem::temp_directory_path() / "rt_moe_test_XXXXXX").string();
    REQUIRE(::mkdtemp(path.data()) != nullptr);
    path_ = path;
  }
  ~TempDir() {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A tmpfs mounted on a fresh temporary directory (mount(2) options `data`, flags `flags`, e.g.
// MS_RDONLY), unmounted and removed when done. Needs root or CAP_SYS_ADMIN: mounted() says
// whether it is there, why() why not.
class TmpfsMount {
 public:
  explicit TmpfsMount(const char* data, unsigned long flags = 0) {
    if (::mount("tmpfs", path().c_str(), "tmpfs", flags, data) == 0) {
      mounted_ = true;
    } else {
      why_ = std::strerror(errno);
    }
  }
  ~TmpfsMount() {
    if (mounted_) ::umount2(path().c_str(), MNT_DETACH);
  }
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::filesystem::path& path() const { return dir_.path(); }

 private:
  TempDir dir_;  // removed after the unmount
  bool mounted_ = false;
  std::string why_;
};

// Starts args[0] (a path: no shell, no PATH search) with this environment. With `output`, its
// stdout and stderr go to that file, created or truncated.
inline pid_t spawn(const std::vector<std::string>& args, const std::filesystem::path& output = {}) {
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!output.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(rc == 0);
  return pid;
}

// Waits for `pid` to end; returns the status as waitpid() gives it.
inline int wait_for(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

// Starts one child per argument list, then creates `go`, the file the children wait for so that
// they start together, and waits for every child; each must exit 0.
inline void run_together(const std::vector<std::vector<std::string>>& children,
                         const std::filesystem::path& go) {
  std::vector<pid_t> pids;
  for (const std::vector<std::string>& args : children) pids.push_back(spawn(args));
  std::ofstream(go) << "go";
  for (pid_t pid : pids) {
    const int status = wait_for(pid);
    INFO("child " << pid << " status " << status);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
  }
}

// The whole file; empty when it cannot be read.
inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// Collects the warnings (and worse) of the rt_moe logger while it lives.
class Warnings {
 public:
  Warnings() : level_(rt_moe::log().level()) {
    rt_moe::log().sinks().push_back(sink_);
    if (level_ > spdlog::level::warn) rt_moe::log().set_level(spdlog::level::warn);
  }
  ~Warnings() {
    auto& sinks = rt_moe::log().sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
    rt_moe::log().set_level(level_);
  }
  Warnings(const Warnings&) = delete;
  Warnings& operator=(const Warnings&) = delete;
  std::vector<std::string> messages() const {
    std::lock_guard lock(sink_->messages_mutex);
    return sink_->messages;
  }
  std::size_t count() const { return messages().size(); }

 private:
  struct Sink : spdlog::sinks::base_sink<std::mutex> {
    mutable std::mutex messages_mutex;
    std::vector<std::string> messages;
    void sink_it_(const spdlog::details::log_msg& msg) override {
      if (msg.level < spdlog::level::warn) return;
      std::lock_guard lock(messages_mutex);
      messages.emplace_back(msg.payload.data(), msg.payload.size());
    }
    void flush_() override {}
  };
  std::shared_ptr<Sink> sink_ = std::make_shared<Sink>();
  spdlog::level::level_enum level_;
};

}  // namespace rt_moe::test
