// rt_moe_prewarm given hostile values and files: each is a usage error (exit 2) with a message
// naming the problem, never a crash. The tool runs without a shell, so a signal shows as a signal
// (WIFSIGNALED), not as an exit code. test_tools.cpp holds the plainer usage errors (unknown flag,
// --max-tokens 0, --dtype fp8, malformed JSON, an unknown key).
#ifdef RT_MOE_TOOLS_DIR

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace rt_moe {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

struct Outcome {
  int status = 0;      // as waitpid() gives it
  std::string output;  // stdout and stderr
};

// Runs rt_moe_prewarm with `args` (no shell), its output going to a file in `dir`.
Outcome prewarm(const std::vector<std::string>& args, const fs::path& dir) {
  std::vector<std::string> argv = {std::string(RT_MOE_TOOLS_DIR) + "/rt_moe_prewarm"};
  argv.insert(argv.end(), args.begin(), args.end());
  const fs::path log = dir / "output.log";
  Outcome outcome;
  outcome.status = test::wait_for(test::spawn(argv, log));
  outcome.output = test::read_bytes(log);
  return outcome;
}

// Checks that `outcome` is exit 2 (not a signal) and that its message holds each of `words`.
void check_usage_error(const Outcome& outcome, const std::vector<std::string>& words) {
  INFO(outcome.output);
  REQUIRE_FALSE(WIFSIGNALED(outcome.status));
  REQUIRE(WIFEXITED(outcome.status));
  CHECK(WEXITSTATUS(outcome.status) == 2);
  for (const std::string& word : words) {
    INFO("expected in the message: " << word);
    CHECK(outcome.output.find(word) != std::string::npos);
  }
}

const char* kValid = R"({"d_hidden": 64, "d_expert": 32, "n_routed_experts": 4,
                         "n_shared_experts": 0, "top_k": 2})";

// kValid with `from` replaced by `to`.
std::string edited(const std::string& from, const std::string& to) {
  std::string text = kValid;
  const std::size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("tools hostile: rt_moe_prewarm rejects bad values with exit 2", "[tools]") {
  TempDir dir;
  const std::vector<std::string> base = {
      "--preset", "tiny", "--arch", "sm_90a", "--cache-dir", (dir.path() / "cache").string()};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), base.begin(), base.end());
    return extra;
  };
  check_usage_error(prewarm(with({"--max-tokens", "-5"}), dir.path()), {"--max-tokens"});
  check_usage_error(prewarm(with({"--max-tokens", "99999999999999999999999"}), dir.path()),
                    {"--max-tokens"});
  check_usage_error(prewarm(with({"--max-tokens", "12abc"}), dir.path()), {"--max-tokens"});
  check_usage_error(prewarm(with({"--dtype", "int8"}), dir.path()), {"--dtype", "int8"});
  check_usage_error(prewarm(with({"--y-dtype", "bf16"}), dir.path()), {"--y-dtype", "bf16"});
  check_usage_error(prewarm(with({"--jobs", "-1"}), dir.path()), {"--jobs"});
  check_usage_error(prewarm(with({"--max-tokens"}), dir.path()), {"--max-tokens"});
  check_usage_error(
      prewarm({"--preset", "tiny", "--config", "x.json", "--arch", "sm_90a"}, dir.path()),
      {"--config"});
}

TEST_CASE("tools hostile: rt_moe_prewarm rejects bad config files with exit 2 naming the problem",
          "[tools]") {
  TempDir dir;
  struct Case {
    const char* name;
    std::string text;
    std::vector<std::string> words;  // besides the file's path
  };
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::vector<Case> cases = {
      {"malformed", "{\"d_hidden\": 64,, }", {"malformed JSON"}},
      {"truncated", "{\"d_hidden\": 6", {"malformed JSON"}},
      {"array", "[1, 2, 3]", {"JSON object", "array"}},
      {"empty", "", {"malformed JSON"}},
      {"binary",
       std::string("\x7f"
                   "ELF\0\0\xff\xfe",
                   8),
       {"malformed JSON"}},
      {"huge_integer",
       edited("\"d_hidden\": 64", "\"d_hidden\": 18446744073709551616"),
       {"'d_hidden'"}},
      {"huge_exponent", edited("\"d_hidden\": 64", "\"d_hidden\": 1e400"), {"1e400"}},
      {"huge_max_tokens",
       edited("\"top_k\": 2", "\"top_k\": 2, \"max_tokens\": 9223372036854775807"),
       {"'max_tokens'"}},
      {"negative_top_k", edited("\"top_k\": 2", "\"top_k\": -2"), {"top_k", "-2"}},
      {"top_k_over_experts", edited("\"top_k\": 2", "\"top_k\": 5"), {"top_k", "5"}},
      {"odd_hidden", edited("\"d_hidden\": 64", "\"d_hidden\": 63"), {"d_hidden", "63"}},
      {"huge_scale",
       edited("\"top_k\": 2", "\"top_k\": 2, \"routing\": {\"routed_scaling_factor\": 1e300}"),
       {"routed_scaling_factor"}},
      {"deep", edited("64", deep), {"nested deeper"}},
      {"deep_top", deep, {"nested deeper"}},
  };
  for (const Case& c : cases) {
    INFO("case " << c.name);
    const fs::path path = dir.path() / (std::string(c.name) + ".json");
    std::ofstream(path, std::ios::binary) << c.text;
    std::vector<std::string> words = c.words;
    words.push_back(path.string());
    check_usage_error(prewarm({"--config", path.string(), "--arch", "sm_90a"}, dir.path()), words);
  }

  const fs::path missing = dir.path() / "no" / "such.json";
  check_usage_error(prewarm({"--config", missing.string(), "--arch", "sm_90a"}, dir.path()),
                    {missing.string(), "no such file"});
  check_usage_error(prewarm({"--config", dir.path().string(), "--arch", "sm_90a"}, dir.path()),
                    {dir.path().string(), "not a regular file"});
}

}  // namespace rt_moe

#endif  // RT_MOE_TOOLS_DIR
