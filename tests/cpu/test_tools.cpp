// The command-line tools as a user runs them (separate processes): rt_moe_prewarm fills a cache
// that a second run only reads and that recovers from a damaged entry; bad flags and files exit 2
// with a message; rt_moe_bench without a GPU exits 1 saying so. No GPU needed.
#ifdef RT_MOE_TOOLS_DIR

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "compiler.h"
#include "driver.h"
#include "kernels.h"
#include "nvrtc_sm90a.h"
#include "test_util.h"

namespace rt_moe {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

struct ToolRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// Runs `tool` (in RT_MOE_TOOLS_DIR) with `args` through the shell, capturing its output; `env`
// ("NAME=VALUE ...") is set for the tool alone.
ToolRun run_tool(const std::string& tool, const std::string& args, const std::string& env = "") {
  const std::string command = env + (env.empty() ? "" : " ") + std::string(RT_MOE_TOOLS_DIR) + "/" +
                              tool + " " + args + " 2>&1";
  ToolRun run;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) {
    run.output.append(buffer, n);
  }
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

struct Summary {
  int kernels = -1, hits = -1, compiled = -1;
};

// The one summary line that ends every successful prewarm.
Summary parse_summary(const std::string& output) {
  static const std::regex kLine(
      R"(prewarm: (\d+) kernels, (\d+) cache hits, (\d+) compiled, [0-9.]+ s)");
  std::smatch match;
  INFO(output);
  REQUIRE(std::regex_search(output, match, kLine));
  return {std::stoi(match[1]), std::stoi(match[2]), std::stoi(match[3])};
}

}  // namespace

TEST_CASE(
    "tools: rt_moe_prewarm fills the cache, a second run only hits, a damaged entry is rebuilt",
    "[tools][nvrtc]") {
  TempDir cache;
  const std::string args =
      "--preset tiny --arch sm_90a --max-tokens 64 --jobs 2 --cache-dir " + cache.path().string();

  ToolRun first = run_tool("rt_moe_prewarm", args);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const Summary cold = parse_summary(first.output);
  CHECK(cold.kernels > 0);
  CHECK(cold.compiled == cold.kernels);
  CHECK(cold.hits == 0);

  ToolRun second = run_tool("rt_moe_prewarm", args);
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  const Summary warm = parse_summary(second.output);
  CHECK(warm.kernels == cold.kernels);
  CHECK(warm.hits == warm.kernels);
  CHECK(warm.compiled == 0);

  // Truncate one entry: the next run finds it bad, removes it and compiles that kernel only.
  fs::path entry;
  for (const auto& file : fs::recursive_directory_iterator(cache.path())) {
    if (file.is_regular_file() && file.path().extension() == ".cubin") {
      entry = file.path();
      break;
    }
  }
  REQUIRE_FALSE(entry.empty());
  fs::resize_file(entry, fs::file_size(entry) / 2);
  ToolRun third = run_tool("rt_moe_prewarm", args);
  INFO(third.output);
  REQUIRE(third.exit_code == 0);
  const Summary repaired = parse_summary(third.output);
  CHECK(repaired.kernels == cold.kernels);
  CHECK(repaired.compiled == 1);
  CHECK(repaired.hits == cold.kernels - 1);
}

TEST_CASE("tools: rt_moe_prewarm --tune also compiles every tile candidate, then only hits",
          "[tools][nvrtc]") {
  TempDir cache;
  const std::string args =
      "--preset tiny --arch sm_90a --max-tokens 4096 --jobs 2 --cache-dir " + cache.path().string();
  ToolRun plain = run_tool("rt_moe_prewarm", args);
  REQUIRE(plain.exit_code == 0);
  ToolRun tune = run_tool("rt_moe_prewarm", args + " --tune");
  INFO(tune.output);
  REQUIRE(tune.exit_code == 0);
  const Summary heuristic = parse_summary(plain.output), candidates = parse_summary(tune.output);
  CHECK(candidates.kernels > heuristic.kernels);  // more tiles than the heuristic's
  CHECK(candidates.hits == heuristic.kernels);    // those were cached by the first run
  CHECK(candidates.compiled == candidates.kernels - heuristic.kernels);
  ToolRun again = run_tool("rt_moe_prewarm", args + " --tune");
  REQUIRE(again.exit_code == 0);
  CHECK(parse_summary(again.output).compiled == 0);
}

TEST_CASE("tools: a process's kernel log (RT_MOE_KERNEL_LOG) prewarms the same kernels elsewhere",
          "[tools][nvrtc]") {
  TempDir dir;
  const fs::path log = dir.path() / "kernels.tsv";
  const std::string first_cache = (dir.path() / "first").string();
  // The logging process: a prewarm, whose every compile and cache hit is a kernel it loads.
  ToolRun logged = run_tool("rt_moe_prewarm",
                            "--preset tiny --arch sm_90a --max-tokens 64 --jobs 2 "
                            "--cache-dir " +
                                first_cache,
                            "RT_MOE_KERNEL_LOG=" + log.string());
  INFO(logged.output);
  REQUIRE(logged.exit_code == 0);
  const Summary model = parse_summary(logged.output);
  std::ifstream in(log);
  int lines = 0, comments = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind('#', 0) == 0) {
      ++comments;
    } else {
      REQUIRE(parse_kernel_log_line(line).has_value());
      CHECK(parse_kernel_log_line(line)->second == "sm_90a");
      ++lines;
    }
  }
  CHECK(comments == 1);
  CHECK(lines == model.kernels);  // each distinct kernel once

  // Another cache, from the log alone: the same kernels, compiled; then only hits.
  const std::string args =
      "--kernels " + log.string() + " --jobs 2 --cache-dir " + (dir.path() / "second").string();
  ToolRun replay = run_tool("rt_moe_prewarm", args);
  INFO(replay.output);
  REQUIRE(replay.exit_code == 0);
  const Summary cold = parse_summary(replay.output);
  CHECK(cold.kernels == model.kernels);
  CHECK(cold.compiled == model.kernels);
  ToolRun again = run_tool("rt_moe_prewarm", args);
  REQUIRE(again.exit_code == 0);
  CHECK(parse_summary(again.output).hits == model.kernels);
  // The first cache already holds them: the log names the very cache entries.
  ToolRun first =
      run_tool("rt_moe_prewarm", "--kernels " + log.string() + " --cache-dir " + first_cache);
  REQUIRE(first.exit_code == 0);
  CHECK(parse_summary(first.output).hits == model.kernels);

  // A model with it, or a malformed line: exit 2, naming the problem and the line.
  ToolRun both = run_tool("rt_moe_prewarm", "--kernels " + log.string() + " --preset tiny");
  CHECK(both.exit_code == 2);
  CHECK(both.output.find("--kernels") != std::string::npos);
  const fs::path bad = dir.path() / "bad.tsv";
  std::ofstream(bad) << "# a comment\n\nsm_90a\tcombine\tcombine.cuh\n";
  ToolRun malformed = run_tool("rt_moe_prewarm", "--kernels " + bad.string());
  CHECK(malformed.exit_code == 2);
  CHECK(malformed.output.find("line 3") != std::string::npos);
  CHECK(malformed.output.find("3 fields") != std::string::npos);
  ToolRun missing = run_tool("rt_moe_prewarm", "--kernels " + (dir.path() / "none.tsv").string());
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find("none.tsv") != std::string::npos);
}

TEST_CASE("tools: rt_moe_prewarm --keep-going compiles the rest of a log after a kernel fails",
          "[tools][nvrtc]") {
  TempDir dir;
  // A line that no longer compiles (H = 2047 fails the router's static_assert), before one that
  // does; one job, so the order is the log's.
  const std::string bad = "rt_moe::RouterLogits<rt_moe::BF16, 2047, 8, 4, 8, 4, true>";
  const std::string good = "rt_moe::RouterLogits<rt_moe::BF16, 256, 8, 4, 8, 4, true>";
  auto line = [](const std::string& instance) {
    return "sm_90a\trouting\trouting.cuh\t" + instance + "\trt_moe::RouterParams\t0\n";
  };
  const fs::path log = dir.path() / "kernels.tsv";
  std::ofstream(log) << "# rt_moe kernel log\n" << line(bad) << line(good);
  const std::string args =
      "--kernels " + log.string() + " --jobs 1 --cache-dir " + (dir.path() / "cache").string();

  // Without --keep-going the first failure stops it: exit 1, naming the kernel, no summary.
  ToolRun stopped = run_tool("rt_moe_prewarm", args);
  INFO(stopped.output);
  CHECK(stopped.exit_code == 1);
  CHECK(stopped.output.find(bad) != std::string::npos);
  CHECK(stopped.output.find("compiled, ") == std::string::npos);

  // With it: the good kernel compiles, the failure is named with NVRTC's log and counted, exit 1.
  ToolRun going = run_tool("rt_moe_prewarm", args + " --keep-going");
  INFO(going.output);
  CHECK(going.exit_code == 1);
  CHECK(going.output.find("prewarm: failed: ") != std::string::npos);
  CHECK(going.output.find(bad) != std::string::npos);
  CHECK(going.output.find("static assertion failed") != std::string::npos);
  static const std::regex kFailed(
      R"(prewarm: 2 kernels, 0 cache hits, 1 compiled, 1 failed, [0-9.]+ s)");
  CHECK(std::regex_search(going.output, kFailed));

  // The good kernel is in the cache: a log of it alone only hits.
  const fs::path good_log = dir.path() / "good.tsv";
  std::ofstream(good_log) << line(good);
  ToolRun again = run_tool("rt_moe_prewarm", "--kernels " + good_log.string() + " --cache-dir " +
                                                 (dir.path() / "cache").string());
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  const Summary hit = parse_summary(again.output);
  CHECK(hit.kernels == 1);
  CHECK(hit.hits == 1);
}

TEST_CASE("tools: rt_moe_prewarm: bad flags and values exit 2 with a message", "[tools]") {
  ToolRun unknown = run_tool("rt_moe_prewarm", "--preset tiny --arch sm_90a --frobnicate");
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.output.find("--frobnicate") != std::string::npos);

  ToolRun no_model = run_tool("rt_moe_prewarm", "--arch sm_90a");
  CHECK(no_model.exit_code == 2);
  CHECK(no_model.output.find("--preset") != std::string::npos);

  ToolRun bad_preset = run_tool("rt_moe_prewarm", "--preset nonesuch --arch sm_90a");
  CHECK(bad_preset.exit_code == 2);
  CHECK(bad_preset.output.find("nonesuch") != std::string::npos);

  ToolRun bad_arch = run_tool("rt_moe_prewarm", "--preset tiny --arch compute_90");
  CHECK(bad_arch.exit_code == 2);
  CHECK(bad_arch.output.find("compute_90") != std::string::npos);

  ToolRun bad_tokens = run_tool("rt_moe_prewarm", "--preset tiny --arch sm_90a --max-tokens 0");
  CHECK(bad_tokens.exit_code == 2);

  ToolRun bad_dtype = run_tool("rt_moe_prewarm", "--preset tiny --arch sm_90a --dtype fp8");
  CHECK(bad_dtype.exit_code == 2);

  TempDir dir;
  const fs::path config = dir.path() / "broken.json";
  std::ofstream(config) << "{\"d_hidden\": 64,, }";
  ToolRun malformed = run_tool("rt_moe_prewarm", "--config " + config.string() + " --arch sm_90a");
  CHECK(malformed.exit_code == 2);
  CHECK(malformed.output.find("malformed JSON") != std::string::npos);
  CHECK(malformed.output.find(config.string()) != std::string::npos);

  const fs::path unknown_key = dir.path() / "unknown_key.json";
  std::ofstream(unknown_key) << R"({"d_hidden": 64, "d_expert": 32, "n_routed_experts": 4,
                                    "n_shared_experts": 0, "top_k": 2, "topk": 3})";
  ToolRun key = run_tool("rt_moe_prewarm", "--config " + unknown_key.string() + " --arch sm_90a");
  CHECK(key.exit_code == 2);
  CHECK(key.output.find("'topk'") != std::string::npos);
}

TEST_CASE("tools: rt_moe_prewarm without a GPU needs --arch", "[tools]") {
  if (driver::available()) {
    RT_MOE_SKIP_TEST("a GPU is present: the default arch comes from it; nothing to check");
  }
  ToolRun run = run_tool("rt_moe_prewarm", "--preset tiny --max-tokens 8");
  CHECK(run.exit_code == 2);
  CHECK(run.output.find("--arch") != std::string::npos);
}

TEST_CASE("tools: rt_moe_bench without a GPU exits 1 and says so, bad flags exit 2", "[tools]") {
  ToolRun unknown = run_tool("rt_moe_bench", "--preset tiny --frobnicate");
  CHECK(unknown.exit_code == 2);
  ToolRun bad_tokens = run_tool("rt_moe_bench", "--preset tiny --tokens 1,x");
  CHECK(bad_tokens.exit_code == 2);
  ToolRun json = run_tool("rt_moe_bench", "--preset tiny --json /nonexistent/rt_moe/out.json");
  CHECK(json.exit_code == 2);
  CHECK(json.output.find("/nonexistent/rt_moe/out.json") != std::string::npos);
  // An unwritable --plot path fails at once, like --json, before looking for a GPU.
  ToolRun plot = run_tool("rt_moe_bench", "--preset tiny --plot /nonexistent/rt_moe/out.png");
  CHECK(plot.exit_code == 2);
  CHECK(plot.output.find("--plot") != std::string::npos);
  CHECK(plot.output.find("/nonexistent/rt_moe/out.png") != std::string::npos);
  if (driver::available()) {
    RT_MOE_SKIP_TEST("a GPU is present: the no-GPU path of rt_moe_bench is not checked");
  }
  ToolRun run = run_tool("rt_moe_bench", "--preset tiny --tokens 1");
  CHECK(run.exit_code == 1);
  CHECK(run.output.find("no usable GPU") != std::string::npos);
  // A writable --plot path is accepted; without a GPU the bench stops before plotting.
  TempDir dir;
  const fs::path png = dir.path() / "plot.png";
  ToolRun plotted = run_tool("rt_moe_bench", "--preset tiny --tokens 1 --plot " + png.string());
  CHECK(plotted.exit_code == 1);
  CHECK(plotted.output.find("no usable GPU") != std::string::npos);
  CHECK(plotted.output.find("not implemented") == std::string::npos);
}

TEST_CASE("tools: the benchmark's read kernels (bench.cuh) compile for sm_90a", "[tools][nvrtc]") {
  // The specs rt_moe_bench's HBM ceiling uses (tools/bench_ceilings.cpp): plain and evict-first
  // loads, 4 and 8 in flight a thread.
  for (const char* variant : {"4, false", "4, true", "8, false", "8, true"}) {
    const KernelSpec spec{"bench", "bench.cuh",
                          std::string("rt_moe::ReadBandwidth<256, ") + variant + ">",
                          "rt_moe::ReadParams"};
    const std::string cubin = compile_for_sm90a(spec);
    CHECK(cubin.compare(0, 4,
                        "\x7f"
                        "ELF") == 0);
  }
  // The cp.async ring variant, and the random fill of the read's buffer (ReadData::kRandom).
  for (const KernelSpec& spec :
       {KernelSpec{"bench", "bench.cuh", "rt_moe::RingRead<128, 8, 8192>", "rt_moe::ReadParams"},
        KernelSpec{"bench", "bench.cuh", "rt_moe::FillBits<256>", "rt_moe::FillParams"}}) {
    const std::string cubin = compile_for_sm90a(spec);
    CHECK(cubin.compare(0, 4,
                        "\x7f"
                        "ELF") == 0);
  }
}

}  // namespace rt_moe

#endif  // RT_MOE_TOOLS_DIR
