// rt_moe_bench: times the MoE forward on the GPU against a floor measured in the same run.
//
//   rt_moe_bench --preset deepseek-v3 [--tokens 1,64,4096] [--check] [--json out.json]
//                [--plot out.png]
//
// Per token count T, after warm-up forwards apart from timing and `steady_ms` of forwards back to
// back (the clock sustained work gets: the H200 meets its 700 W limit within ~0.1 s of prefill
// GEMMs), `iters` forwards and `iters` replays of the forward captured in a CUDA graph are timed,
// alternating, with device events right around forward() (cuGraphLaunch), each after an L2 flush;
// the medians are reported ("ms" and "graph ms"), every sample in the JSON.
//   FLOPs = 6*T*k*H*I + 6*T*S*I*H
//   bytes = hit * 3*H*I*2 + 3*H*S*I*2 + 2*T*H*2 + E*H*2
// where `hit` is the number of distinct experts the run actually routed to (read back from the
// GPU). Under uniform routing one would expect E * (1 - (1 - k/E)^T) (in the JSON as
// experts_hit_uniform). floor = max(FLOPs / GEMM rate, bytes / HBM read bandwidth), both ceilings
// measured here (REFERENCE.md section 5); the GEMM rate is cuBLAS's steady rate (seconds of
// products back to back, as the forwards are timed), and the burst floor, with the rate of single
// products on an idle GPU, is printed beside it (docs/PERF.md 16a). Also timed apart: cold compile
// and warm cache load of one bucket's kernels, and the host cost of one forward() call (enqueue
// only) at T = 1.
// Power (unless --no-power; needs NVML): the board's draw while the GEMM ceiling's and a steady HBM
// read's windows run, idle, and over each T's steady forwards (with the share of polls whose clock
// the power cap, or a thermal or hardware slowdown, held down), and from them the floor that the
// power limit sets (tools/power.h: a model, printed in a table of its own).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "bench_ceilings.h"
#include "bucket.h"
#include "compiler.h"
#include "driver.h"
#include "gpu_harness.h"
#include "kernels.h"
#include "plot.h"
#include "power.h"
#include "reference.h"
#include "rt_moe/runtime.h"
#include "specs.h"
#include "tool_common.h"

// git describe of the tree this binary was built from (cmake/git_commit.cmake).
extern const char* const rt_moe_git_commit;

namespace rt_moe::tools {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr std::int64_t kDefaultTokens[] = {1, 8, 64, 512, 4096, 16384};
constexpr std::uint64_t kWeightSeed = 20240601;

struct Options {
  ModelChoice model;
  std::vector<std::int64_t> tokens;
  bool check = false;
  std::string json_file;
  std::string plot_file;
  int iters = 20;
  int warmup = 3;
  int steady_ms = 1000;  // forwards back to back before timing each T (0: none)
  bool compile_timing = true;
  bool tune = false;  // also time a tuning runtime, in turns with the heuristic one
  std::string tile;   // pin the grouped GEMM tile (RuntimeOptions::tile)
  bool launch_timing = true;
  bool profile = false;        // one more forward per T between cuProfilerStart and cuProfilerStop
  bool profile_graph = false;  // the same, as one replay of the forward captured in a CUDA graph
  int timeline_replays = 0;    // > 0: the stage timeline of one forward and of this many replays
  bool balanced = false;   // inputs that route every expert T k / E tokens (balance_activations)
  std::vector<int> bands;  // also time every T with each RuntimeOptions::tile_band
  std::vector<std::string> compare_tiles;  // also time every T with each pinned tile
  bool power = true;  // read the board's power (PowerMeter) and print the power floor
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct CompileTiming {
  std::string bucket;
  std::size_t kernels = 0;
  double cold_wall_s = 0;  // all kernels compiled in parallel, as the runtime does
  double cold_sum_s = 0;   // the sum of per-kernel compile times
  double cold_max_s = 0;   // the slowest kernel
  double warm_load_s = 0;  // a fresh cache on the same directory: disk loads + module loads
};

// Cold compile and warm cache load of the kernels of the bucket serving `tokens`, each with a
// fresh CubinCache on an empty temporary directory (the process-wide cache is left alone).
CompileTiming time_compile(const MoeConfig& config, std::int64_t tokens, const std::string& arch,
                           CUcontext context) {
  namespace fs = std::filesystem;
  CompileTiming timing;
  const Bucket bucket = bucket_for(config, tokens);
  const GemmTile tile = default_tile(config, bucket.max_tokens, arch);
  const std::vector<KernelSpec> specs = forward_specs(config, bucket.max_tokens, arch);
  timing.bucket = fmt::format("bucket {} (<= {} tokens), tile {}", bucket.group_sum_max,
                              bucket.max_tokens, tile.describe());
  timing.kernels = specs.size();

  std::string pattern = (fs::temp_directory_path() / "rt_moe_bench_XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    throw Error(ErrorCode::kIo, fmt::format("mkdtemp({}) failed", pattern));
  }
  struct RemoveDir {
    fs::path dir;
    ~RemoveDir() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } remove{pattern};
  cache::CacheOptions options;
  options.dir = pattern;
  {
    cache::CubinCache cold(options);
    const Clock::time_point start = Clock::now();
    std::vector<std::future<CompiledCubin>> compiled;
    for (const KernelSpec& spec : specs) {
      compiled.push_back(std::async(
          std::launch::async, [&spec, &arch, &cold] { return compile_cubin(spec, arch, cold); }));
    }
    for (auto& f : compiled) {
      CompiledCubin cubin = f.get();
      timing.cold_sum_s += cubin.seconds;
      timing.cold_max_s = std::max(timing.cold_max_s, cubin.seconds);
    }
    timing.cold_wall_s = seconds_since(start);
  }
  {
    cache::CubinCache warm(options);
    KernelCache kernels(context, arch, warm);
    const Clock::time_point start = Clock::now();
    for (const KernelSpec& spec : specs) kernels.get(spec);
    timing.warm_load_s = seconds_since(start);
  }
  return timing;
}

// Host time of one forward() call at T = 1 (enqueue only; the bucket is loaded): median over
// rounds of calls, synchronizing between rounds so the launch queue never fills.
double time_launch_us(MoeRuntime& moe, const driver::DeviceBuffer& x, driver::DeviceBuffer& out,
                      CUstream stream) {
  constexpr int kRounds = 20, kCallsPerRound = 16;
  for (int i = 0; i < 3; ++i) moe.forward(x.as<const void>(), out.as<void>(), 1, stream);
  RT_MOE_CALL(cuStreamSynchronize, stream);
  std::vector<double> us;
  for (int round = 0; round < kRounds; ++round) {
    for (int call = 0; call < kCallsPerRound; ++call) {
      const Clock::time_point start = Clock::now();
      moe.forward(x.as<const void>(), out.as<void>(), 1, stream);
      us.push_back(seconds_since(start) * 1e6);
    }
    RT_MOE_CALL(cuStreamSynchronize, stream);
  }
  return median(us);
}

struct TokenResult {
  std::int64_t tokens = 0;
  std::string plan;
  double graph_ms = 0;  // median of the forward captured once in a CUDA graph and replayed
  // Host time of one enqueue (median over the timed runs): forward() and cuGraphLaunch. When it
  // exceeds the GPU time of what is queued before it, the GPU waits and the events count it.
  double enqueue_ms = 0, graph_enqueue_ms = 0;
  // With --check: the graph's last replay wrote the same output as a stream forward, bit for bit
  // (the forward is deterministic, REFERENCE.md section 2).
  bool graph_identical = true;
  double route_ms = 0;  // median of the routing stages alone (MoeRuntime::route)
  double tuned_ms = 0;  // with --tune: a tuning runtime's median (0: not measured)
  std::string tuned_plan;
  double first_forward_s = 0;  // host wall time of the first forward (bucket load/compile)
  double ms = 0, ms_min = 0, ms_max = 0;
  std::vector<double> ms_samples, graph_ms_samples;  // each timed forward, in order (ms)
  double flops = 0, bytes = 0;
  std::int64_t experts_hit = 0;
  double experts_hit_uniform = 0;
  double tflops = 0, gbps = 0, floor_ms = 0, over_floor = 0;
  double burst_floor_ms = 0, over_burst_floor = 0;  // with the GEMM's burst rate
  int steady_forwards = 0;  // forwards run back to back before timing (Options::steady_ms)
  // Over the steady forwards (PowerMeter; NaN when not read): the average draw, the SM clock,
  // the energy of one forward; the power floor (PowerModel::floor_s) and the time over it.
  PowerMeter::Reading power;
  double joules_per_forward = std::nan("");
  double power_floor_ms = std::nan(""), over_power_floor = std::nan("");
  bool checked = false;
  test::OutputCheck check;  // with --check: the outputs against the CPU reference
};

std::int64_t distinct_experts(MoeRuntime& moe) {
  const MoeRuntime::RoutingView routing = moe.last_routing();
  std::vector<std::int32_t> ids(std::size_t(routing.tokens) * moe.config().top_k);
  if (ids.empty()) return 0;
  RT_MOE_CALL(cuMemcpyDtoH, ids.data(), reinterpret_cast<CUdeviceptr>(routing.topk_ids),
              ids.size() * sizeof(std::int32_t));
  std::set<std::int32_t> hit(ids.begin(), ids.end());
  return std::int64_t(hit.size());
}

// T's input rows (seed 1000 + T, the same for every runtime timed at T) and an output buffer.
struct TokenInputs {
  std::vector<std::uint16_t> x;
  driver::DeviceBuffer x_dev, out_dev;
};

TokenInputs token_inputs(const MoeConfig& c, std::int64_t tokens, bool balanced) {
  std::vector<std::uint16_t> x = test::random_activations(c, tokens, 1000 + tokens);
  if (balanced) test::balance_activations(c, x, tokens);
  driver::DeviceBuffer x_dev = test::upload(x);
  return {std::move(x), std::move(x_dev),
          driver::DeviceBuffer(std::max<std::size_t>(16, std::size_t(tokens) * c.d_hidden * 2))};
}

// Forwards back to back for `steady_ms` (a synchronize every 16), so that the timed ones run at
// the clock and power state that sustained work gets, as the GEMM ceiling's steady rate does.
// `enqueue(n)` enqueues the n-th (from 0). With `meter`, its reading of the window from the first
// enqueue to the last forward's end.
struct SteadyRun {
  int forwards = 0;
  double seconds = 0;
  PowerMeter::Reading power;
};

SteadyRun run_steady(CUstream stream, int steady_ms, const std::function<void(int)>& enqueue,
                     PowerMeter* meter = nullptr) {
  SteadyRun run;
  if (steady_ms <= 0) return run;
  const PowerMeter::Active sampling(meter);
  RT_MOE_CALL(cuStreamSynchronize, stream);
  const Clock::time_point start = Clock::now();
  while (seconds_since(start) * 1e3 < steady_ms) {
    enqueue(run.forwards);
    if (++run.forwards % 16 == 0) RT_MOE_CALL(cuStreamSynchronize, stream);
  }
  RT_MOE_CALL(cuStreamSynchronize, stream);
  run.seconds = seconds_since(start);
  if (meter != nullptr) run.power = meter->between(start, Clock::now());
  return run;
}

// The timed forwards: `iters` stream forwards (forward()'s launches) and as many replays of the
// forward captured once in a CUDA graph (what a server that graphs its decode steps sees: no host
// launch cost between the stages), alternating, each after an L2 flush, so that both kinds run in
// the same clock and power state. At the 700 W cap of an H200 the SM clock swings by up to a third
// for ~100 ms after a change of load; a loop of one kind after the other's put such a swing into
// one median only (PERF.md 29c). With `replayed`, the last replay's output is downloaded into it.
struct TimedForwards {
  std::vector<double> stream_ms, graph_ms;
  double enqueue_ms = 0, graph_enqueue_ms = 0;  // host time of one enqueue (median)
};

TimedForwards time_forwards(MoeRuntime& moe, const driver::DeviceBuffer& x_dev,
                            driver::DeviceBuffer& out_dev, std::int64_t tokens, int iters,
                            L2Flush& flush, CUstream stream, std::vector<std::uint16_t>* replayed) {
  const driver::GraphExec exec = test::capture_forward(moe, x_dev, out_dev, tokens, stream,
                                                       CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  RT_MOE_CALL(cuGraphLaunch, exec.get(), stream);  // warm-up
  std::vector<double> host_ms, graph_host_ms;
  const auto host_timed = [](std::vector<double>& host, const auto& enqueue) {
    const Clock::time_point start = Clock::now();
    enqueue();
    host.push_back(seconds_since(start) * 1e3);
  };
  std::vector<std::vector<double>> ms = time_events_in_turns(
      stream, iters, &flush,
      {[&] {
         host_timed(host_ms, [&] {
           moe.forward(x_dev.as<const void>(), out_dev.as<void>(), tokens, stream);
         });
       },
       [&] {
         host_timed(graph_host_ms, [&] { RT_MOE_CALL(cuGraphLaunch, exec.get(), stream); });
       }});
  TimedForwards t;
  t.stream_ms = std::move(ms[0]);
  t.graph_ms = std::move(ms[1]);
  t.enqueue_ms = median(host_ms);
  t.graph_enqueue_ms = median(graph_host_ms);
  if (replayed != nullptr) {
    replayed->resize(std::size_t(tokens) * moe.config().d_hidden);
    out_dev.download(replayed->data(), replayed->size() * 2);
  }
  return t;
}

// Where each stage kernel ran (MoeRuntime::stage_timeline) in one stream forward and in `replays`
// replays of the forward captured in a CUDA graph, each alone after an L2 flush: microseconds
// from the first stage's start to each stage's first block's start and last warp's end.
void print_timeline(MoeRuntime& moe, const driver::DeviceBuffer& x_dev,
                    driver::DeviceBuffer& out_dev, std::int64_t tokens, int replays, L2Flush& flush,
                    CUstream stream) {
  const driver::GraphExec exec = test::capture_forward(moe, x_dev, out_dev, tokens, stream,
                                                       CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  RT_MOE_CALL(cuGraphLaunch, exec.get(), stream);  // warm-up
  moe.stage_timeline(tokens);                      // clears the spans
  std::vector<std::pair<std::string, std::vector<MoeRuntime::StageSpan>>> runs;
  for (int run = 0; run <= replays; ++run) {
    flush(stream);
    RT_MOE_CALL(cuStreamSynchronize, stream);
    if (run == 0) {
      moe.forward(x_dev.as<const void>(), out_dev.as<void>(), tokens, stream);
    } else {
      RT_MOE_CALL(cuGraphLaunch, exec.get(), stream);
    }
    runs.emplace_back(run == 0 ? "stream" : fmt::format("replay {}", run),
                      moe.stage_timeline(tokens));
  }
  std::printf("timeline T=%lld (us from the first stage's start: start-end of each stage)\n",
              (long long)tokens);
  for (const auto& [name, spans] : runs) {
    if (spans.empty()) continue;
    std::uint64_t origin = spans.front().start_ns, last = 0;
    for (const MoeRuntime::StageSpan& s : spans) {
      origin = std::min(origin, s.start_ns);
      last = std::max(last, s.end_ns);
    }
    std::string line;
    for (const MoeRuntime::StageSpan& s : spans) {
      line += fmt::format("  {} {:.1f}-{:.1f}", s.stage, (s.start_ns - origin) * 1e-3,
                          (s.end_ns - origin) * 1e-3);
    }
    std::printf("  %-9s %9.1f us:%s\n", name.c_str(), (last - origin) * 1e-3, line.c_str());
  }
}

// Forwards of several runtimes (the main one first) timed in turns at one T: a warm-up forward
// each, `steady_ms` of their forwards back to back in turns, then `iters` rounds in which each
// times one forward after an L2 flush. Turns, not one loop a runtime after the other: the H200's
// clock swings by up to a third for ~100 ms after a change of load at its 700 W cap, which put up
// to ~3% into whichever runtime's loop caught it (PERF.md 29c, 29d); in turns every runtime's
// samples share the swings, and the median of each round's ratio to the main runtime compares
// them within a round. Returns each runtime's samples, in order.
std::vector<std::vector<double>> time_in_turns(const std::vector<MoeRuntime*>& runtimes,
                                               const driver::DeviceBuffer& x_dev,
                                               driver::DeviceBuffer& out_dev, std::int64_t tokens,
                                               const Options& options, L2Flush& flush,
                                               CUstream stream) {
  const auto forward = [&](MoeRuntime* moe) {
    moe->forward(x_dev.as<const void>(), out_dev.as<void>(), tokens, stream);
  };
  for (MoeRuntime* moe : runtimes) {
    for (int i = 0; i < options.warmup; ++i) forward(moe);
  }
  run_steady(stream, options.steady_ms,
             [&](int n) { forward(runtimes[std::size_t(n) % runtimes.size()]); });
  std::vector<std::function<void()>> bodies;
  for (MoeRuntime* moe : runtimes) bodies.push_back([&forward, moe] { forward(moe); });
  return time_events_in_turns(stream, options.iters, &flush, bodies);
}

TokenResult bench_tokens(MoeRuntime& moe, const test::HostWeights* weights, std::int64_t tokens,
                         const Options& options, const Ceiling& hbm, const Ceiling& gemm,
                         PowerMeter* meter, const PowerModel& power, L2Flush& flush,
                         CUstream stream) {
  const MoeConfig& c = moe.config();
  TokenResult r;
  r.tokens = tokens;
  TokenInputs inputs = token_inputs(c, tokens, options.balanced);
  const std::vector<std::uint16_t>& x = inputs.x;
  const driver::DeviceBuffer& x_dev = inputs.x_dev;
  driver::DeviceBuffer& out_dev = inputs.out_dev;

  // Warm-up, apart from timing; the first forward loads (or compiles) the bucket's kernels.
  Clock::time_point start = Clock::now();
  moe.forward(x_dev.as<const void>(), out_dev.as<void>(), tokens, stream);
  RT_MOE_CALL(cuStreamSynchronize, stream);
  r.first_forward_s = seconds_since(start);
  // After the first forward: before it, no plan exists and describe() names the heuristic tile,
  // not a pinned one (RuntimeOptions::tile).
  r.plan = moe.describe(tokens);
  for (int i = 1; i < options.warmup; ++i) {
    moe.forward(x_dev.as<const void>(), out_dev.as<void>(), tokens, stream);
  }
  const SteadyRun steady = run_steady(
      stream, options.steady_ms,
      [&](int) { moe.forward(x_dev.as<const void>(), out_dev.as<void>(), tokens, stream); }, meter);
  r.steady_forwards = steady.forwards;
  r.power = steady.power;

  std::vector<std::uint16_t> replayed;  // with --check: the graph's output
  const TimedForwards timed = time_forwards(moe, x_dev, out_dev, tokens, options.iters, flush,
                                            stream, weights != nullptr ? &replayed : nullptr);
  const std::vector<double>& ms = timed.stream_ms;
  r.ms_samples = ms;
  r.graph_ms_samples = timed.graph_ms;
  r.enqueue_ms = timed.enqueue_ms;
  r.graph_enqueue_ms = timed.graph_enqueue_ms;
  r.ms = median(ms);
  r.ms_min = *std::min_element(ms.begin(), ms.end());
  r.ms_max = *std::max_element(ms.begin(), ms.end());
  r.graph_ms = median(timed.graph_ms);
  r.route_ms = median(time_events_ms(stream, options.iters, &flush,
                                     [&] { moe.route(x_dev.as<const void>(), tokens, stream); }));
  // Exactly one forward (stream launches, then a graph replay), L2 flushed, for `ncu
  // --profile-from-start off` (or nsys --capture-range; ncu --graph-profiling node for the graph).
  const auto profile_once = [&](const auto& enqueue) {
    flush(stream);
    RT_MOE_CALL(cuStreamSynchronize, stream);
    RT_MOE_CALL(cuProfilerStart);
    enqueue();
    RT_MOE_CALL(cuStreamSynchronize, stream);
    RT_MOE_CALL(cuProfilerStop);
  };
  if (options.profile) {
    profile_once([&] { moe.forward(x_dev.as<const void>(), out_dev.as<void>(), tokens, stream); });
  }
  if (options.profile_graph) {
    const driver::GraphExec exec = test::capture_forward(moe, x_dev, out_dev, tokens, stream,
                                                         CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    profile_once([&] { RT_MOE_CALL(cuGraphLaunch, exec.get(), stream); });
  }
  if (options.timeline_replays > 0) {
    print_timeline(moe, x_dev, out_dev, tokens, options.timeline_replays, flush, stream);
  }

  const double T = double(tokens), H = double(c.d_hidden), I = double(c.d_expert);
  const double E = double(c.n_routed_experts), S = double(c.n_shared_experts);
  const double k = double(c.top_k), elem = double(dtype_bytes(c.dtype));
  r.experts_hit = distinct_experts(moe);
  r.experts_hit_uniform = E * (1.0 - std::pow(1.0 - k / E, T));
  r.flops = 6.0 * T * k * H * I + 6.0 * T * S * I * H;
  r.bytes = double(r.experts_hit) * 3 * H * I * elem + 3 * H * S * I * elem + 2 * T * H * elem +
            E * H * elem;
  r.tflops = r.flops / (r.ms * 1e-3) / 1e12;
  r.gbps = r.bytes / (r.ms * 1e-3) / 1e9;
  r.floor_ms = std::max(r.flops / gemm.value, r.bytes / hbm.value) * 1e3;
  r.over_floor = r.ms / r.floor_ms;
  if (gemm.burst > 0) {
    r.burst_floor_ms = std::max(r.flops / gemm.burst, r.bytes / hbm.value) * 1e3;
    r.over_burst_floor = r.ms / r.burst_floor_ms;
  }
  if (r.power.valid() && r.steady_forwards > 0) {
    r.joules_per_forward = r.power.watts * steady.seconds / r.steady_forwards;
  }
  if (power.valid()) {
    r.power_floor_ms = power.floor_s(r.flops, r.bytes) * 1e3;
    r.over_power_floor = r.ms / r.power_floor_ms;
  }

  if (weights != nullptr) {
    r.checked = true;
    const test::ForwardRun run = test::run_forward(moe, x_dev, out_dev, tokens, stream);
    r.check = test::check_outputs(c, *weights, x, tokens, run);
    r.graph_identical = replayed == run.out;
  }
  return r;
}

std::string check_cell(const TokenResult& r) {
  if (!r.checked) return "-";
  return fmt::format("{} {:.1e}{}", r.check.pass() ? "PASS" : "FAIL", r.check.comparison.rel_l2,
                     r.graph_identical ? "" : " (graph replay differs)");
}

// NaN (not measured) is written as null.
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// A power window's reading (PowerMeter::Reading), NaN as null.
json reading_json(const PowerMeter::Reading& r) {
  return json{{"watts", number(r.watts)},
              {"sm_mhz", number(r.sm_mhz)},
              {"counter_updates", r.updates},
              {"power_capped", number(r.power_capped)},
              {"slowed", number(r.slowed)}};
}

json result_json(const TokenResult& r) {
  json j = {{"tokens", r.tokens},
            {"plan", r.plan},
            {"first_forward_s", r.first_forward_s},
            {"ms_median", r.ms},
            {"graph_ms_median", r.graph_ms},
            {"enqueue_host_ms_median", r.enqueue_ms},
            {"graph_enqueue_host_ms_median", r.graph_enqueue_ms},
            {"route_ms_median", r.route_ms},
            {"tuned_ms_median", r.tuned_ms},
            {"tuned_plan", r.tuned_plan},
            {"ms_min", r.ms_min},
            {"ms_max", r.ms_max},
            {"ms_samples", r.ms_samples},
            {"graph_ms_samples", r.graph_ms_samples},
            {"flops", r.flops},
            {"bytes", r.bytes},
            {"experts_hit", r.experts_hit},
            {"experts_hit_uniform", r.experts_hit_uniform},
            {"tflops", r.tflops},
            {"gbps", r.gbps},
            {"floor_ms", r.floor_ms},
            {"time_over_floor", r.over_floor},
            {"burst_floor_ms", r.burst_floor_ms},
            {"time_over_burst_floor", r.over_burst_floor},
            {"steady_forwards", r.steady_forwards}};
  j["power"] = reading_json(r.power);
  j["power"]["joules_per_forward"] = number(r.joules_per_forward);
  j["power"]["power_floor_ms"] = number(r.power_floor_ms);
  j["power"]["time_over_power_floor"] = number(r.over_power_floor);
  if (r.checked) {
    j["check"] = {{"pass", r.check.pass()},
                  {"rel_l2", r.check.comparison.rel_l2},
                  {"max_abs_err", r.check.comparison.max_abs_err},
                  {"bad_elements", r.check.comparison.bad},
                  {"nan_rows", r.check.nan_rows},
                  {"tokens_checked", r.check.tokens_checked},
                  {"graph_replay_identical", r.graph_identical},
                  {"detail", r.check.comparison.describe()}};
  } else {
    j["check"] = nullptr;
  }
  return j;
}

int bench(const Options& options) {
  const ModelConfig model = options.model.load();
  const MoeConfig& config = model.moe;
  // Opened now, so an unwritable path fails before minutes of work, not after.
  std::ofstream json_out;
  if (!options.json_file.empty()) {
    json_out.open(options.json_file);
    if (!json_out) throw UsageError(fmt::format("--json: cannot write '{}'", options.json_file));
  }
  std::ofstream plot_out;
  if (!options.plot_file.empty()) {
    plot_out.open(options.plot_file, std::ios::binary);
    if (!plot_out) throw UsageError(fmt::format("--plot: cannot write '{}'", options.plot_file));
  }
  std::vector<std::int64_t> token_counts = options.tokens;
  if (token_counts.empty()) {
    for (std::int64_t t : kDefaultTokens) {
      if (t <= model.max_tokens) token_counts.push_back(t);
    }
    if (token_counts.empty()) token_counts.push_back(model.max_tokens);
  }

  std::string why;
  if (!driver::available(&why)) {
    std::fprintf(stderr, "rt_moe_bench: no usable GPU: %s\n", why.c_str());
    return kExitFailure;
  }
  const driver::DeviceInfo device = driver::device_info(0);
  if (device.cc_major < 8) {
    std::fprintf(stderr,
                 "rt_moe_bench: no usable GPU: %s is sm_%d%d, rt_moe needs sm_80 or newer\n",
                 device.name.c_str(), device.cc_major, device.cc_minor);
    return kExitFailure;
  }
  test::use_primary_context();
  CUcontext context = nullptr;
  RT_MOE_CALL(cuCtxGetCurrent, &context);
  driver::Stream stream = driver::Stream::create();
  const std::string arch = device.arch();
  const std::string nvrtc_version = nvrtc::version();
  std::printf("device: %s (%s, %d SMs), driver %d, NVRTC %s, rt_moe %s\n", device.name.c_str(),
              arch.c_str(), device.sm_count, device.driver_version, nvrtc_version.c_str(),
              rt_moe_git_commit);
  std::printf("model: %s: %s, routing %s\n", model.name.c_str(), config.describe().c_str(),
              config.routing.describe().c_str());
  std::fflush(stdout);

  // The power meter (tools/power.h); `live` when it can read, else null.
  std::unique_ptr<PowerMeter> meter;
  if (options.power) meter = std::make_unique<PowerMeter>(device.pci_bus_id);
  PowerMeter* const live = meter != nullptr && meter->available() ? meter.get() : nullptr;

  // Ceilings first, while the device memory is free.
  Ceiling hbm, gemm, hbm_steady, hbm_random, hbm_random_steady;
  {
    KernelCache kernels(context, arch);
    hbm = measure_hbm_read(kernels, device, stream.get());
    // Of random bits, as the weights are (docs/PERF.md 47b): a diagnostic beside the ceiling.
    hbm_random = measure_hbm_read(kernels, device, stream.get(), 20, 0, ReadData::kRandom);
    // The same read kernel over the bytes of a decode GEMM (DeepSeek-V3 at T = 1: down 0.26 GB,
    // gate/up 0.53 GB, both 0.79 GB) and twice that: what one short kernel streams, ramp and tail
    // included.
    for (std::size_t mb : {264, 528, 792, 1584}) {
      const Ceiling c = measure_hbm_read(kernels, device, stream.get(), 20, mb << 20);
      std::printf(
          "diagnostic: HBM read of %zu MiB in one kernel: %.0f GB/s (%.0f%% of the ceiling)", mb,
          c.value / 1e9, 100 * c.value / hbm.value);
      for (const Ceiling::Variant& v : c.variants) {
        std::printf("; %s %.0f", v.name.c_str(), v.value / 1e9);
      }
      std::printf("\n");
    }
  }
  {
    const PowerMeter::Active sampling(live);
    gemm = measure_gemm_rate(config.dtype, stream.get());
  }
  // The power floor's three draws: the GEMM's steady windows (just run), a steady read, idle.
  PowerModel power;
  PowerMeter::Reading gemm_power, read_power, random_read_power, idle_power;
  if (live != nullptr) {
    gemm_power = live->between(gemm.steady_from, gemm.steady_to);
    {
      KernelCache kernels(context, arch);
      const PowerMeter::Active sampling(live);
      hbm_steady = measure_hbm_read_steady(kernels, device, stream.get());
      hbm_random_steady = measure_hbm_read_steady(kernels, device, stream.get(), 1.0,
                                                  ReadData::kRandom, hbm_random.best_variant);
    }
    read_power = live->between(hbm_steady.steady_from, hbm_steady.steady_to);
    random_read_power = live->between(hbm_random_steady.steady_from, hbm_random_steady.steady_to);
    idle_power = live->idle(std::chrono::milliseconds(300), std::chrono::milliseconds(700));
    // A byte's energy is that of the steady read of random bits, as the weights are: it costs
    // ~45% more than a constant buffer's (docs/PERF.md 47b, 48a).
    if (gemm.measured && gemm_power.valid() && random_read_power.valid() && idle_power.valid()) {
      power = {idle_power.watts, live->limit_w(),         gemm_power.watts,
               gemm.value,       random_read_power.watts, hbm_random_steady.value};
    }
  }
  std::printf("ceiling: HBM read %.0f GB/s (%s)\n", hbm.value / 1e9, hbm.note.c_str());
  for (const Ceiling::Variant& v : hbm.variants) {
    std::printf("diagnostic: HBM read of the ceiling's buffer, %s: %.0f GB/s\n", v.name.c_str(),
                v.value / 1e9);
  }
  std::printf("diagnostic: HBM read of random data %.0f GB/s (%s)\n", hbm_random.value / 1e9,
              hbm_random.note.c_str());
  std::printf("ceiling: dense GEMM %.0f TFLOP/s, steady (%s)\n", gemm.value / 1e12,
              gemm.note.c_str());
  if (gemm.burst > 0) {
    std::printf(
        "diagnostic: dense GEMM burst %.0f TFLOP/s (median of single products); steady run: "
        "first window %.0f, last five %.0f TFLOP/s; the burst floor (t/burst) uses the burst "
        "rate\n",
        gemm.burst / 1e12, gemm.steady_first / 1e12, gemm.steady_last / 1e12);
  }
  const auto draw = [](const PowerMeter::Reading& r) {
    if (!r.valid()) return std::string("not read (fewer than 2 counter updates)");
    std::string text = fmt::format("{:.0f} W at {:.0f} MHz", r.watts, r.sm_mhz);
    if (std::isfinite(r.power_capped)) {
      text += fmt::format(", capped {:.0f}% slowed {:.0f}%", 100 * r.power_capped, 100 * r.slowed);
    }
    return text;
  };
  if (meter == nullptr) {
    std::printf("power: not measured (--no-power)\n");
  } else if (!meter->available()) {
    std::printf("power: not measured: %s\n", meter->why().c_str());
  } else {
    std::printf(
        "power: limit %.0f W; idle %s; HBM read of random data %s (%.0f GB/s, %s); of constant "
        "data %s (%.0f GB/s, %s); dense GEMM %s (the steady windows)\n",
        live->limit_w(), draw(idle_power).c_str(), draw(random_read_power).c_str(),
        hbm_random_steady.value / 1e9, hbm_random_steady.note.c_str(), draw(read_power).c_str(),
        hbm_steady.value / 1e9, hbm_steady.note.c_str(), draw(gemm_power).c_str());
    std::printf(
        "power: capped / slowed: the share of polls whose clock was held down by the software "
        "power cap / by a thermal or hardware slowdown (NVML's clock event reasons)%s\n",
        live->reads_reasons() ? "" : "; not read: this NVML does not export them");
    if (power.valid()) {
      std::printf(
          "power model: %.2f pJ a FLOP and %.1f pJ a byte of random data read above idle; the "
          "power floor is "
          "max((FLOPs x pJ/FLOP + bytes x pJ/B) / (%.0f - %.0f W), floor) (tools/power.h)\n",
          power.joules_per_flop() * 1e12, power.joules_per_byte() * 1e12, power.limit_w,
          power.idle_w);
    } else {
      std::printf("power model: not valid (a draw not read, or the GEMM rate not measured)\n");
    }
  }
  std::fflush(stdout);

  CompileTiming compile;
  if (options.compile_timing) {
    compile = time_compile(config, token_counts.back(), arch, context);
    std::printf(
        "compile: %s: %zu kernels cold %.2f s (parallel; sum %.2f s, slowest %.2f s), "
        "warm cache load + module load %.3f s\n",
        compile.bucket.c_str(), compile.kernels, compile.cold_wall_s, compile.cold_sum_s,
        compile.cold_max_s, compile.warm_load_s);
    std::fflush(stdout);
  }

  Clock::time_point start = Clock::now();
  std::unique_ptr<test::HostWeights> host_weights =
      std::make_unique<test::HostWeights>(test::random_weights(config, kWeightSeed));
  if (options.balanced) test::balance_router(config, *host_weights);
  const test::DeviceWeights weights = test::upload(*host_weights);
  if (!options.check) host_weights.reset();  // tens of GB for the large models
  std::fprintf(stderr, "weights: random (reference scales), generated and uploaded in %.1f s\n",
               seconds_since(start));
  if (options.balanced) {
    std::printf("routing: balanced (token t to experts (t k + j) mod E, j < k, equal weights)\n");
  }

  // The heuristic tiles, whatever the tuning store holds; --tune compares a tuning runtime below.
  RuntimeOptions heuristic_options;
  heuristic_options.tuning = RuntimeOptions::Tuning::kHeuristic;
  heuristic_options.tile = options.tile;
  MoeRuntime moe(config, heuristic_options);
  moe.prepare(weights.view());
  L2Flush flush(context, arch, device);

  double launch_us = 0;
  // At T = 1 (a pinned tile need not serve that bucket).
  if (options.launch_timing && options.tile.empty()) {
    const std::vector<std::uint16_t> x1 = test::random_activations(config, 1, 7);
    const driver::DeviceBuffer x1_dev = test::upload(x1);
    driver::DeviceBuffer out1(std::size_t(config.d_hidden) * 2);
    launch_us = time_launch_us(moe, x1_dev, out1, stream.get());
    std::printf("launch: forward() host time at T=1: %.1f us (median, enqueue only)\n", launch_us);
  }

  // Variants, each on its own runtime (same weights): every tile order band, then every pinned
  // tile. Timed after the main runtime's own loops at each T, in turns with it (time_in_turns),
  // so that the machine's clock swings fall on all of them alike.
  struct Variant {
    std::string label;
    std::unique_ptr<MoeRuntime> moe;
    bool tunes = false;      // --tune's runtime: its first forward at a T tunes that bucket
    std::vector<double> ms;  // per T; NaN where the variant cannot serve T's bucket
    // per T: the median over the rounds of this variant's forward over the main runtime's in the
    // same round (NaN where not run)
    std::vector<double> ratio;
  };
  std::vector<Variant> variants;
  auto add_variant = [&](std::string label, const RuntimeOptions& variant_options) {
    variants.push_back(
        {std::move(label), std::make_unique<MoeRuntime>(config, variant_options), {}});
    variants.back().moe->prepare(weights.view());
  };
  for (int band : options.bands) {
    RuntimeOptions band_options = heuristic_options;
    band_options.tile_band = band;
    add_variant(fmt::format("band {} ms", band), band_options);
  }
  for (const std::string& tile : options.compare_tiles) {
    RuntimeOptions tile_options = heuristic_options;
    tile_options.tile = tile;
    add_variant(tile, tile_options);
  }
  if (options.tune) {
    // A runtime that tunes each bucket on its first forward (or reuses the tuning store's
    // choice), timed in turns with the heuristic's like the other variants: timed after it, on a
    // hotter GPU, the same tile read 2.5% slower (docs/PERF.md 16d).
    RuntimeOptions tune_options;
    tune_options.tuning = RuntimeOptions::Tuning::kTune;
    add_variant("tuned", tune_options);
    variants.back().tunes = true;
  }

  // Every variant that can serve T's bucket, in turns with the main runtime (time_in_turns); a
  // pinned tile that is no candidate of T's bucket is named, and nothing of it launched.
  const auto time_variants = [&](std::int64_t tokens) {
    TokenInputs inputs = token_inputs(config, tokens, options.balanced);
    const driver::DeviceBuffer& x_dev = inputs.x_dev;
    driver::DeviceBuffer& out_dev = inputs.out_dev;
    std::vector<MoeRuntime*> runtimes = {&moe};
    std::vector<Variant*> timed;
    for (Variant& v : variants) {
      v.ms.push_back(std::nan(""));
      v.ratio.push_back(std::nan(""));
      const Clock::time_point first_start = Clock::now();
      try {
        v.moe->forward(x_dev.as<const void>(), out_dev.as<void>(), tokens, stream.get());
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kInvalidArgument) throw;
        std::printf("T=%lld %s: not run: %s\n", (long long)tokens, v.label.c_str(), e.what());
        continue;
      }
      if (v.tunes) {
        RT_MOE_CALL(cuStreamSynchronize, stream.get());
        std::printf("T=%lld tuned: first forward (tuning) %.1f s\n", (long long)tokens,
                    seconds_since(first_start));
      }
      runtimes.push_back(v.moe.get());
      timed.push_back(&v);
    }
    if (timed.empty()) return;
    const std::vector<std::vector<double>> ms =
        time_in_turns(runtimes, x_dev, out_dev, tokens, options, flush, stream.get());
    for (std::size_t j = 0; j < timed.size(); ++j) {
      std::vector<double> ratios;
      for (std::size_t i = 0; i < ms[0].size(); ++i) ratios.push_back(ms[j + 1][i] / ms[0][i]);
      Variant& v = *timed[j];
      v.ms.back() = median(ms[j + 1]);
      v.ratio.back() = median(ratios);
      std::printf("T=%lld %s: %s: %.4f ms; %.4f x the main runtime (%.4f ms in turns with it)\n",
                  (long long)tokens, v.label.c_str(), v.moe->describe(tokens).c_str(), v.ms.back(),
                  v.ratio.back(), median(ms[0]));
    }
    std::fflush(stdout);
  };

  // The largest T's plan first, so that no T's plan grows the workspace under the graphs that
  // the T before captured (MoeRuntime would keep the captured one, with a warning). Its first
  // forward (kernels compiled or loaded), on that T's own inputs, is reported at its T.
  const std::int64_t largest = *std::max_element(token_counts.begin(), token_counts.end());
  double largest_first_forward_s = 0;
  {
    TokenInputs inputs = token_inputs(config, largest, options.balanced);
    const Clock::time_point start = Clock::now();
    moe.forward(inputs.x_dev.as<const void>(), inputs.out_dev.as<void>(), largest, stream.get());
    RT_MOE_CALL(cuStreamSynchronize, stream.get());
    largest_first_forward_s = seconds_since(start);
  }

  std::vector<TokenResult> results;
  for (std::int64_t tokens : token_counts) {
    results.push_back(bench_tokens(moe, host_weights.get(), tokens, options, hbm, gemm, live, power,
                                   flush, stream.get()));
    if (tokens == largest) results.back().first_forward_s = largest_first_forward_s;
    const TokenResult& r = results.back();
    std::printf(
        "T=%lld: %s; experts hit %lld of %lld; first forward %.3f s; enqueue (host) %.3f ms, "
        "graph launch (host) %.3f ms%s%s\n",
        (long long)tokens, r.plan.c_str(), (long long)r.experts_hit,
        (long long)config.n_routed_experts, r.first_forward_s, r.enqueue_ms, r.graph_enqueue_ms,
        r.checked ? "; check: " : "", r.checked ? r.check.comparison.describe().c_str() : "");
    std::fflush(stdout);
    if (variants.empty()) continue;
    time_variants(tokens);
    for (const Variant& v : variants) {
      if (!v.tunes) continue;
      results.back().tuned_ms = v.ms.back();
      results.back().tuned_plan = v.moe->describe(tokens);
    }
  }

  bool all_pass = true;
  std::printf("\n%8s %10s %10s %9s %9s %10s %11s %8s %10s %9s  %s\n", "T", "ms", "graph ms",
              "TFLOP/s", "GB/s", "floor ms", "time/floor", "t/burst", "tuned ms", "route ms",
              "check");
  for (const TokenResult& r : results) {
    const std::string tuned = r.tuned_ms > 0 ? fmt::format("{:.4f}", r.tuned_ms) : "-";
    const std::string burst =
        r.over_burst_floor > 0 ? fmt::format("{:.2f}", r.over_burst_floor) : "-";
    std::printf("%8lld %10.4f %10.4f %9.1f %9.0f %10.4f %11.2f %8s %10s %9.4f  %s\n",
                (long long)r.tokens, r.ms, r.graph_ms, r.tflops, r.gbps, r.floor_ms, r.over_floor,
                burst.c_str(), tuned.c_str(), r.route_ms, check_cell(r).c_str());
    all_pass = all_pass && (!r.checked || (r.check.pass() && r.graph_identical));
  }
  if (!variants.empty()) {
    // One column per variant (its ms, and in brackets the median of its rounds' ratios to the
    // main runtime, timed in turns; "-" where it could not run), the main runtime's ms first.
    std::printf("\n%8s %10s", "T", "ms");
    for (std::size_t j = 0; j < variants.size(); ++j)
      std::printf(" %19s", fmt::format("[{}]", j + 1).c_str());
    std::printf("\n");
    for (std::size_t i = 0; i < results.size(); ++i) {
      std::printf("%8lld %10.4f", (long long)results[i].tokens, results[i].ms);
      for (const Variant& v : variants) {
        if (std::isnan(v.ms[i])) {
          std::printf(" %19s", "-");
        } else {
          std::printf(" %19s", fmt::format("{:.4f} ({:.4f}x)", v.ms[i], v.ratio[i]).c_str());
        }
      }
      std::printf("\n");
    }
    for (std::size_t j = 0; j < variants.size(); ++j) {
      std::printf("[%zu] %s\n", j + 1, variants[j].label.c_str());
    }
  }

  if (live != nullptr) {
    // Over each T's steady forwards (Options::steady_ms); a model's floor, not the issue's.
    std::printf("\n%8s %8s %8s %7s %7s %11s %15s %17s\n", "T", "W", "SM MHz", "capped", "slowed",
                "J/forward", "power floor ms", "time/power floor");
    for (const TokenResult& r : results) {
      const auto cell = [](double v, const char* format) {
        return std::isfinite(v) ? fmt::format(fmt::runtime(format), v) : std::string("-");
      };
      std::printf("%8lld %8s %8s %7s %7s %11s %15s %17s\n", (long long)r.tokens,
                  cell(r.power.watts, "{:.0f}").c_str(), cell(r.power.sm_mhz, "{:.0f}").c_str(),
                  cell(100 * r.power.power_capped, "{:.0f}%").c_str(),
                  cell(100 * r.power.slowed, "{:.0f}%").c_str(),
                  cell(r.joules_per_forward, "{:.4f}").c_str(),
                  cell(r.power_floor_ms, "{:.4f}").c_str(),
                  cell(r.over_power_floor, "{:.2f}").c_str());
    }
  }

  if (!options.json_file.empty()) {
    json doc = {{"tool", "rt_moe_bench"},
                {"git_commit", rt_moe_git_commit},
                {"device",
                 {{"name", device.name},
                  {"arch", arch},
                  {"sm_count", device.sm_count},
                  {"driver_version", device.driver_version}}},
                {"nvrtc_version", nvrtc_version},
                {"model",
                 {{"name", model.name},
                  {"d_hidden", config.d_hidden},
                  {"d_expert", config.d_expert},
                  {"n_routed_experts", config.n_routed_experts},
                  {"n_shared_experts", config.n_shared_experts},
                  {"top_k", config.top_k},
                  {"dtype", to_string(config.dtype)}}},
                {"iters", options.iters},
                {"warmup", options.warmup},
                {"steady_ms", options.steady_ms},
                {"balanced_routing", options.balanced},
                {"ceilings",
                 {{"hbm_read_bytes_per_s", hbm.value},
                  {"hbm_read_measured", hbm.measured},
                  {"hbm_read_note", hbm.note},
                  {"hbm_read_random_bytes_per_s", hbm_random.value},
                  {"hbm_read_random_note", hbm_random.note},
                  {"gemm_flops_per_s", gemm.value},
                  {"gemm_measured", gemm.measured},
                  {"gemm_note", gemm.note},
                  {"gemm_burst_flops_per_s", gemm.burst},
                  {"gemm_steady_s", gemm.steady_s},
                  {"gemm_window_products", gemm.window_count},
                  {"gemm_steady_first_flops_per_s", gemm.steady_first},
                  {"gemm_steady_last_flops_per_s", gemm.steady_last}}},
                {"launch_us_t1", launch_us},
                {"results", json::array()}};
    if (live == nullptr) {
      doc["power"] = {{"measured", false},
                      {"why", meter == nullptr ? std::string("--no-power") : meter->why()}};
    } else {
      doc["power"] = {{"measured", true},
                      {"limit_w", live->limit_w()},
                      {"idle", reading_json(idle_power)},
                      {"hbm_read", reading_json(read_power)},
                      {"hbm_read_steady_bytes_per_s", hbm_steady.value},
                      {"hbm_read_random", reading_json(random_read_power)},
                      {"hbm_read_random_steady_bytes_per_s", hbm_random_steady.value},
                      {"gemm", reading_json(gemm_power)},
                      {"model_valid", power.valid()},
                      {"joules_per_flop", number(power.valid() ? power.joules_per_flop() : NAN)},
                      {"joules_per_byte", number(power.valid() ? power.joules_per_byte() : NAN)},
                      {"joules_per_byte_of", "hbm_read_random"}};
    }
    if (options.compile_timing) {
      doc["compile"] = {{"bucket", compile.bucket},           {"kernels", compile.kernels},
                        {"cold_wall_s", compile.cold_wall_s}, {"cold_sum_s", compile.cold_sum_s},
                        {"cold_max_s", compile.cold_max_s},   {"warm_load_s", compile.warm_load_s}};
    }
    for (const TokenResult& r : results) doc["results"].push_back(result_json(r));
    for (const Variant& v : variants) {
      json j = {{"label", v.label}, {"ms_median", json::array()}, {"ratio_median", json::array()}};
      for (std::size_t i = 0; i < results.size(); ++i) {
        j["ms_median"].push_back(std::isnan(v.ms[i]) ? json(nullptr) : json(v.ms[i]));
        j["ratio_median"].push_back(std::isnan(v.ratio[i]) ? json(nullptr) : json(v.ratio[i]));
      }
      doc["variants"].push_back(j);
    }
    json_out << doc.dump(2) << "\n";
    json_out.close();
    if (!json_out) throw Error(ErrorCode::kIo, fmt::format("cannot write '{}'", options.json_file));
  }
  if (!options.plot_file.empty()) {
    std::vector<PlotPoint> points;
    for (const TokenResult& r : results) {
      points.push_back({r.tokens, r.ms, r.floor_ms, r.graph_ms});
    }
    const std::string title = fmt::format("{}, {}, {}: forward time vs floor", model.name,
                                          to_string(config.dtype), device.name);
    plot_time_vs_floor(points, title, plot_out, options.plot_file);
    plot_out.close();
    if (!plot_out) throw Error(ErrorCode::kIo, fmt::format("cannot write '{}'", options.plot_file));
    std::printf("plot: %s\n", options.plot_file.c_str());
  }
  return all_pass ? kExitOk : kExitFailure;
}

}  // namespace
}  // namespace rt_moe::tools

int main(int argc, char** argv) {
  using namespace rt_moe::tools;
  Options options;
  CLI::App app("Times the rt_moe forward against a floor measured in the same run.",
               "rt_moe_bench");
  options.model.add_options(app);
  app.add_option("--tokens", options.tokens,
                 "Token counts, comma-separated (default: 1,8,64,512,4096,16384 up to the "
                 "model's max_tokens)")
      ->delimiter(',')
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 24));
  app.add_flag("--check", options.check,
               "Check each T's outputs against the CPU reference on a sample of tokens");
  app.add_option("--json", options.json_file, "Write every number to this JSON file");
  app.add_option("--iters", options.iters, "Timed forwards per token count (median reported)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--warmup", options.warmup, "Untimed forwards per token count before timing")
      ->check(CLI::Range(1, 100000));
  app.add_option("--steady-ms", options.steady_ms,
                 "Before timing each token count, run its forward back to back for this many ms "
                 "(0: not), so that it is timed at the clock sustained work gets, as the GEMM "
                 "ceiling's steady rate is")
      ->check(CLI::Range(0, 600000));
  app.add_flag("!--no-compile-timing", options.compile_timing,
               "Skip timing the cold compile and warm cache load");
  app.add_option("--plot", options.plot_file,
                 "Draw the median time (and the CUDA-graph time) against the floor over the token "
                 "counts, as a PNG file");
  app.add_flag("!--no-launch-timing", options.launch_timing,
               "Skip timing forward()'s host enqueue cost at T = 1");
  app.add_flag("--balanced-routing", options.balanced,
               "Inputs that route every expert T k / E tokens (token t to experts (t k + j) mod E, "
               "equal weights): the router's rows become unit vectors and x's first E elements "
               "pick the experts; the work of a balanced batched GEMM, to compare with cuBLAS");
  app.add_flag("--profile", options.profile,
               "After timing each T, run one more forward (L2 flushed) between cuProfilerStart "
               "and cuProfilerStop, for `ncu --profile-from-start off` (in the --tune and --band "
               "runtimes too)");
  app.add_flag("--profile-graph", options.profile_graph,
               "After timing each T, replay the forward's CUDA graph once (L2 flushed) between "
               "cuProfilerStart and cuProfilerStop, for `ncu --profile-from-start off "
               "--graph-profiling node`");
  app.add_option("--timeline", options.timeline_replays,
                 "After timing each T, print where each stage kernel ran in one stream forward "
                 "and in this many CUDA-graph replays (L2 flushed before each; needs "
                 "RT_MOE_STAGE_TIMELINE=1 in the environment: MoeRuntime::stage_timeline)")
      ->check(CLI::Range(1, 100));
  app.add_option(
         "--band", options.bands,
         "Also time every T with each of these tile order bands (RuntimeOptions::tile_band, "
         "row blocks; comma-separated), each on its own runtime in turns with the main one, "
         "and print a table")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--compare-tile", options.compare_tiles,
                 "Also time every T with this grouped GEMM tile pinned, on its own runtime in "
                 "turns with the main one (may be given several times), and print a table of "
                 "medians and of ratios to the main runtime; a T whose bucket cannot use it "
                 "shows '-'");
  app.add_option("--tile", options.tile,
                 "Pin the grouped GEMM tile for every T, as the plan column prints it (e.g. "
                 "\"sm90ws 128x256x64 wg2 s4\"); a T whose bucket cannot use it fails");
  app.add_flag("!--no-power", options.power,
               "Skip reading the board's power (NVML), the steady HBM read and the idle draw "
               "that the power floor needs");
  app.add_flag("--tune", options.tune,
               "Also tune each token count's bucket (or reuse the tuning store) on a runtime of "
               "its own, timed in turns with the main (heuristic) one, and print the tuned times");
  return run_tool(app, argc, argv, [&] { return bench(options); });
}
