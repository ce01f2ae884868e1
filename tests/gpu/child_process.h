// Runs this test binary again as a second process on one test case (usually a hidden "[.child]"
// one): for what must be seen from a fresh process, as the runtime reads its environment once and
// a disk cache is shared between processes.
#pragma once

#include <spawn.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

extern char** environ;

namespace rt_moe::test {

// Runs test case `test_name` of this binary with `env` ("NAME=value" strings) ahead of this
// process's environment (getenv returns the first match) and REQUIREs that it exits with 0.
inline void run_child_test(std::string test_name, std::vector<std::string> env) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> argv = {const_cast<char*>(self.c_str()), test_name.data(), nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), envp.data()) == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("child test case: " << test_name);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}

}  // namespace rt_moe::test
