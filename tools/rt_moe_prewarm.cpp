// rt_moe_prewarm: compiles every kernel a model's forward can run (every bucket up to max_tokens)
// into the on-disk cache, so a server's first forwards load cubins instead of running NVRTC.
// Needs NVRTC but no GPU (then --arch says what to compile for).
//
//   rt_moe_prewarm --preset deepseek-v3 --arch sm_90a --jobs 16
//   rt_moe_prewarm --kernels kernels.tsv     # the kernels a process logged (RT_MOE_KERNEL_LOG)
//
// The last line on stdout is always the summary:
//   prewarm: <N> kernels, <H> cache hits, <C> compiled, <S> s
// A kernel that does not compile stops the prewarm (exit 1, what was compiled stays cached), unless
// --keep-going: then every other kernel is still compiled, each failure is named on stderr as it
// happens, the summary counts them (..., <C> compiled, <F> failed, <S> s), and the exit is 1.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_set>
#include <vector>

#include "bucket.h"
#include "compiler.h"
#include "driver.h"
#include "gpu_harness.h"
#include "kernels.h"
#include "reference.h"
#include "rt_moe/runtime.h"
#include "specs.h"
#include "tool_common.h"

namespace rt_moe::tools {
namespace {

struct Options {
  ModelChoice model;
  std::string arch;
  std::int64_t max_tokens = 0;  // 0: the model's
  int jobs = 0;                 // 0: one per hardware thread
  std::string cache_dir;
  bool tune = false;
  bool keep_going = false;   // --keep-going: compile the rest after a kernel fails
  std::string kernels_file;  // --kernels: a kernel log (kernels.h) instead of a model
};

// Shows how far the compile got: a redrawn bar on a terminal, one line per kernel otherwise
// (logs and CI keep every line).
class Progress {
 public:
  explicit Progress(std::size_t total) : total_(total), tty_(isatty(STDERR_FILENO) != 0) {
    if (tty_) draw();
  }

  void done(const KernelSpec& spec, const CompiledCubin& cubin) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++done_;
    if (tty_) {
      draw();
      if (done_ == total_) std::fputc('\n', stderr);
    } else {
      static constexpr const char* kSources[] = {"memory", "disk", "compiled"};
      std::fprintf(stderr, "prewarm: [%zu/%zu] %-8s %6.2f s  %s\n", done_, total_,
                   kSources[int(cubin.source)], cubin.seconds, spec.instance.c_str());
    }
  }

 private:
  void draw() const {
    constexpr std::size_t kWidth = 40;
    const std::size_t filled = total_ == 0 ? kWidth : done_ * kWidth / total_;
    std::fprintf(stderr, "\r[%s%s] %zu/%zu", std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, ' ').c_str(), done_, total_);
    std::fflush(stderr);
  }

  std::mutex mutex_;
  std::size_t done_ = 0;
  std::size_t total_;
  bool tty_;
};

std::string pick_arch(const std::string& requested) {
  if (!requested.empty()) {
    if (!nvrtc::is_target(requested)) {
      throw UsageError(fmt::format("--arch '{}' is not a target like sm_90a or sm_80", requested));
    }
    return requested;
  }
  std::string why;
  if (!driver::available(&why)) {
    throw UsageError(
        fmt::format("no GPU to take the target from ({}): pass --arch, e.g. --arch sm_90a", why));
  }
  return driver::device_info(0).arch();
}

// Every distinct kernel of every bucket, in ladder order (smallest bucket first); with `tune`, the
// kernels of every tile candidate too, so that tuning at run time compiles nothing.
std::vector<KernelSpec> prewarm_specs(const MoeConfig& config, std::int64_t max_tokens,
                                      const std::string& arch, bool tune, std::size_t* buckets) {
  std::vector<KernelSpec> specs;
  std::unordered_set<std::string> seen;
  auto add = [&](std::vector<KernelSpec> more) {
    for (KernelSpec& spec : more) {
      if (seen.insert(spec.source()).second) specs.push_back(std::move(spec));
    }
  };
  // Without a GPU the opt-in shared memory limit is Hopper's (227 KB); tiles over a smaller
  // device's limit are compiled for nothing, which is harmless.
  const int max_smem = driver::available() ? driver::device_info(0).max_smem_optin : 232448;
  const std::vector<Bucket> ladder = bucket_ladder(config, max_tokens);
  for (const Bucket& bucket : ladder) {
    add(forward_specs(config, bucket.max_tokens, arch));
    if (tune) {
      for (const GemmTile& tile : candidate_tiles(config, bucket.max_tokens, arch, max_smem)) {
        add(forward_specs(config, tile, bucket.max_tokens));
      }
    }
  }
  *buckets = ladder.size();
  return specs;
}

// With a GPU: tunes every bucket on random weights at the reference generator's scales (the
// routing they give is close to uniform, which is what the tile choice depends on), so the tuning
// store holds a choice for each bucket before the server starts. Without a GPU: says so.
void tune_on_gpu(const MoeConfig& config, std::int64_t max_tokens, const std::string& arch) {
  std::string why;
  if (!driver::available(&why)) {
    std::fprintf(stderr,
                 "prewarm: --tune: no GPU (%s): compiled every candidate; the timing runs on first "
                 "use with RT_MOE_TUNE=1\n",
                 why.c_str());
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  test::use_primary_context();
  const test::DeviceWeights weights = test::upload(test::random_weights(config, 20240601));
  RuntimeOptions options;
  options.arch = arch;
  options.tuning = RuntimeOptions::Tuning::kTune;
  MoeRuntime moe(config, options);
  moe.prepare(weights.view());
  moe.reserve(max_tokens);  // tunes every bucket without a stored choice
  for (const Bucket& bucket : bucket_ladder(config, max_tokens)) {
    std::fprintf(stderr, "prewarm: tuned %s\n", moe.describe(bucket.max_tokens).c_str());
  }
  std::fprintf(stderr, "prewarm: tuning on %s took %.1f s\n", driver::device_info(0).name.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// The distinct kernels of a kernel log (RT_MOE_KERNEL_LOG), each for the arch it was logged for
// unless `arch` is given.
std::vector<std::pair<KernelSpec, std::string>> logged_specs(const std::string& path,
                                                             const std::string& arch) {
  std::ifstream in(path);
  if (!in) throw UsageError(fmt::format("--kernels: cannot read '{}'", path));
  std::vector<std::pair<KernelSpec, std::string>> specs;
  std::unordered_set<std::string> seen;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::optional<std::pair<KernelSpec, std::string>> parsed;
    try {
      parsed = parse_kernel_log_line(line);
    } catch (const Error& error) {
      throw UsageError(fmt::format("--kernels: {} line {}: {}", path, number, error.what()));
    }
    if (!parsed) continue;
    if (!arch.empty()) parsed->second = arch;
    if (seen.insert(parsed->second + '\n' + parsed->first.source()).second) {
      specs.push_back(std::move(*parsed));
    }
  }
  if (specs.empty()) throw UsageError(fmt::format("--kernels: '{}' names no kernel", path));
  return specs;
}

int prewarm(const Options& options) {
  // Before anything reads the environment: the cache and the logger read it once, on first use.
  if (!options.cache_dir.empty() && setenv("RT_MOE_CACHE_DIR", options.cache_dir.c_str(), 1) != 0) {
    throw UsageError(fmt::format("cannot set RT_MOE_CACHE_DIR to '{}'", options.cache_dir));
  }
  const bool logged = !options.kernels_file.empty();
  if (logged && (!options.model.preset.empty() || !options.model.config_file.empty() ||
                 !options.model.dtype.empty() || !options.model.y_dtype.empty() ||
                 options.max_tokens > 0 || options.tune)) {
    throw UsageError(
        "--kernels names the kernels itself: give no --preset, --config, --dtype, --y-dtype, "
        "--max-tokens or --tune with it");
  }
  const ModelConfig model = logged ? ModelConfig{} : options.model.load();
  const MoeConfig& config = model.moe;
  const std::int64_t max_tokens = options.max_tokens > 0 ? options.max_tokens : model.max_tokens;
  // A log's lines carry their arch; --arch overrides them.
  const std::string arch = logged && options.arch.empty() ? "" : pick_arch(options.arch);
  std::string why;
  if (!nvrtc::available(&why)) throw Error(ErrorCode::kNoCompiler, why);

  std::size_t buckets = 0;
  std::vector<std::pair<KernelSpec, std::string>> specs;
  if (logged) {
    specs = logged_specs(options.kernels_file, arch);
  } else {
    for (KernelSpec& spec : prewarm_specs(config, max_tokens, arch, options.tune, &buckets)) {
      specs.emplace_back(std::move(spec), arch);
    }
  }
  cache::CubinCache& cache = cubin_cache();
  const int jobs =
      std::max(1, options.jobs > 0 ? options.jobs : int(std::thread::hardware_concurrency()));
  if (logged) {
    std::set<std::string> archs;
    for (const auto& item : specs) archs.insert(item.second);
    std::fprintf(stderr, "prewarm: the kernels of %s for %s, NVRTC %s, %d jobs\n",
                 options.kernels_file.c_str(), fmt::format("{}", fmt::join(archs, ", ")).c_str(),
                 nvrtc::version().c_str(), jobs);
  } else {
    std::fprintf(stderr,
                 "prewarm: %s (%s) for %s, %zu buckets up to %lld tokens, NVRTC %s, %d jobs\n",
                 model.name.c_str(), config.describe().c_str(), arch.c_str(), buckets,
                 (long long)max_tokens, nvrtc::version().c_str(), jobs);
  }
  if (cache.persistent()) {
    std::fprintf(stderr, "prewarm: cache %s\n", cache.dir().c_str());
  } else {
    std::fprintf(stderr,
                 "prewarm: warning: the kernel cache is memory only (disabled, or its directory "
                 "is unusable): nothing will be kept\n");
  }

  const auto start = std::chrono::steady_clock::now();
  Progress progress(specs.size());
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> hits{0}, compiled{0};
  std::atomic<bool> stop{false};
  std::exception_ptr first_error;
  std::size_t failures = 0;  // both under error_mutex
  std::mutex error_mutex;
  // In a catch block: keeps the first error; names this one (--keep-going) or stops the workers.
  // The message names the kernel and the arch, then NVRTC's options and log.
  auto fail = [&](const char* what) {
    std::lock_guard<std::mutex> lock(error_mutex);
    if (!first_error) first_error = std::current_exception();
    ++failures;
    if (options.keep_going) {
      std::fprintf(stderr, "prewarm: failed: %s\n", what);
    } else {
      stop = true;
    }
  };
  auto worker = [&] {
    for (std::size_t i; !stop && (i = next++) < specs.size();) {
      try {
        CompiledCubin cubin = compile_cubin(specs[i].first, specs[i].second, cache);
        (cubin.source == cache::Source::kCompiled ? compiled : hits)++;
        progress.done(specs[i].first, cubin);
      } catch (const std::exception& error) {
        fail(error.what());
      } catch (...) {
        fail("unknown error");
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::min<int>(jobs, int(specs.size())); ++t) threads.emplace_back(worker);
  for (std::thread& thread : threads) thread.join();
  if (first_error && !options.keep_going) std::rethrow_exception(first_error);

  if (options.tune && !first_error) tune_on_gpu(config, max_tokens, arch);

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string failed = failures > 0 ? fmt::format(", {} failed", failures) : std::string();
  std::printf("prewarm: %zu kernels, %zu cache hits, %zu compiled%s, %.1f s\n", specs.size(),
              hits.load(), compiled.load(), failed.c_str(), seconds);
  if (first_error) {
    std::fflush(stdout);
    std::fprintf(stderr, "rt_moe_prewarm: %zu of %zu kernels did not compile (see above)\n",
                 failures, specs.size());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace
}  // namespace rt_moe::tools

int main(int argc, char** argv) {
  using namespace rt_moe::tools;
  Options options;
  CLI::App app("Compiles every kernel of a model's forward into the rt_moe kernel cache.",
               "rt_moe_prewarm");
  options.model.add_options(app);
  app.add_option("--arch", options.arch,
                 "Compile target, e.g. sm_90a (default: GPU 0's exact arch; required without a "
                 "GPU)");
  app.add_option("--max-tokens", options.max_tokens,
                 "Largest forward to prepare for (default: the model's max_tokens)")
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 24));
  app.add_option("--jobs,-j", options.jobs, "Compile threads (default: one per hardware thread)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--cache-dir", options.cache_dir,
                 "Kernel cache directory (sets RT_MOE_CACHE_DIR; default: the environment's)");
  app.add_option("--kernels", options.kernels_file,
                 "A kernel log (a process run with RT_MOE_KERNEL_LOG=FILE): compile exactly its "
                 "kernels, each for the arch it names unless --arch is given, instead of a "
                 "model's");
  app.add_flag("--keep-going", options.keep_going,
               "Compile every other kernel after one fails (a log of another revision, say), name "
               "each failure, count them in the summary and exit 1 at the end");
  app.add_flag("--tune", options.tune,
               "Also compile every tile candidate of the tuner; with a GPU, tune every bucket "
               "(random weights) into the tuning store that later processes reuse");
  return run_tool(app, argc, argv, [&] { return prewarm(options); });
}
