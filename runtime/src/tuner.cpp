// Tuning: for a bucket, time every candidate tile on representative data (the prepared weights, a
// random x of the bucket's size), with the L2 flushed before each timed forward, and keep the
// fastest. A candidate that fails to compile or launch, or whose output differs from the heuristic
// tile's beyond the accuracy rule, counts as infinitely slow. Results go to the tuning store,
// which later processes read instead of tuning again.
//
// The times are taken as an engine would see them: after kHeatSeconds of the heuristic's forwards
// back to back (an H200 running prefill GEMMs meets its 700 W limit within ~0.1 s, and its clock
// keeps falling for a second as it warms), one flushed forward of each candidate a round, in
// shuffled rounds that drop the slow candidates after the first few (tuning_rounds.h says why).
// Timed one after the other from an idle GPU, DeepSeek-V3's T = 16384 bucket picked sm90swap
// 144x256 s4, which the steady rounds rank 1.5% behind the heuristic sm90ws 128x256 s4
// (docs/PERF.md 16d).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "base/log.h"
#include "compiler.h"
#include "runtime_impl.h"
#include "tuning_rounds.h"

namespace rt_moe {
namespace {

constexpr double kHeatSeconds = 0.5;
constexpr std::size_t kFlushBytes = 256u << 20;  // over 4x the H200's 60 MB L2

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000) << 16;
  const int exponent = (h >> 10) & 0x1f;
  std::uint32_t mantissa = h & 0x3ff;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(float(mantissa), -24);
  } else if (exponent == 31) {
    magnitude =
        mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    magnitude = std::ldexp(float(mantissa | 0x400), exponent - 25);
  }
  std::uint32_t bits;
  std::memcpy(&bits, &magnitude, 4);
  bits |= sign;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float to_float(DType dtype, std::uint16_t bits) {
  if (dtype == DType::kF16) return half_to_float(bits);
  std::uint32_t word = std::uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &word, 4);
  return f;
}

// Random activations in the dtype: random sign, magnitudes spread over [2^-7, 2) — data that
// routes like real inputs (no zeros, no constants), made without a float -> dtype conversion.
std::vector<std::uint16_t> random_activations(DType dtype, std::size_t count) {
  std::vector<std::uint16_t> x(count);
  std::mt19937_64 rng(0x5eed);
  for (std::size_t i = 0; i < count; i += 4) {
    std::uint64_t r = rng();
    for (std::size_t j = i; j < std::min(count, i + 4); ++j, r >>= 16) {
      const std::uint16_t sign = (r & 1) << 15;
      const std::uint16_t exp_step = (r >> 1) & 7;  // 8 binades
      const std::uint16_t mantissa = (r >> 4) & 0x7f;
      x[j] = dtype == DType::kBF16 ? std::uint16_t(sign | ((120 + exp_step) << 7) | mantissa)
                                   : std::uint16_t(sign | ((8 + exp_step) << 10) | (mantissa << 3));
    }
  }
  return x;
}

// The accuracy rule of REFERENCE.md against the heuristic tile's output: every element within
// 1e-2 + 1e-2 |ref|, no NaN where ref is finite. Returns the number of bad elements.
std::size_t count_mismatches(DType dtype, const std::vector<std::uint16_t>& out,
                             const std::vector<std::uint16_t>& ref) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const float o = to_float(dtype, out[i]), r = to_float(dtype, ref[i]);
    if (!std::isfinite(r)) continue;
    if (!(std::abs(o - r) <= 1e-2f + 1e-2f * std::abs(r))) ++bad;
  }
  return bad;
}

}  // namespace

cache::TuningStore& MoeRuntime::Impl::tuning_store() {
  if (!store) {
    cache::TuningMetadata metadata{device.name, device.sm_count, device.driver_version,
                                   nvrtc::version(), RT_MOE_VERSION};
    store = std::make_unique<cache::TuningStore>(cache::default_tuning_path(), metadata);
  }
  return *store;
}

std::string MoeRuntime::Impl::tuning_problem(const Bucket& bucket) const {
  return fmt::format("{} arch={} bucket={} stage=grouped_gemm", config.describe(), kernels->arch(),
                     bucket.group_sum_max);
}

GemmTile MoeRuntime::Impl::choose_tile(const Bucket& bucket) {
  const std::string& arch = kernels->arch();
  const GemmTile heuristic = default_tile(config, bucket.max_tokens, arch);
  const std::vector<GemmTile> candidates =
      candidate_tiles(config, bucket.max_tokens, arch, device.max_smem_optin);
  if (!pinned_tile.empty()) {
    std::string names;
    for (const GemmTile& t : candidates) {
      if (t.describe() == pinned_tile) return t;
      names += fmt::format("{}'{}'", names.empty() ? "" : ", ", t.describe());
    }
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("options.tile = '{}' is not a candidate for bucket {} (up to {} "
                            "tokens); candidates: {}",
                            pinned_tile, bucket.group_sum_max, bucket.max_tokens, names));
  }
  if (tuning == RuntimeOptions::Tuning::kHeuristic) return heuristic;
  const std::string problem = tuning_problem(bucket);
  if (std::optional<std::string> best = tuning_store().best(problem)) {
    for (const GemmTile& t : candidates) {
      if (t.describe() == *best) {
        log().info("bucket {}: tile {} from the tuning store {} (no tuning)", bucket.group_sum_max,
                   *best, tuning_store().file().string());
        return t;
      }
    }
    log().warn("bucket {}: stored tile '{}' is no longer a candidate; ignoring it",
               bucket.group_sum_max, *best);
  }
  if (tuning != RuntimeOptions::Tuning::kTune || !prepared) return heuristic;
  return tune_bucket(bucket, candidates);
}

GemmTile MoeRuntime::Impl::tune_bucket(const Bucket& bucket,
                                       const std::vector<GemmTile>& candidates) {
  const auto started = std::chrono::steady_clock::now();
  const GemmTile heuristic = default_tile(config, bucket.max_tokens, kernels->arch());
  const int T = int(bucket.max_tokens);
  const std::size_t elements = std::size_t(T) * config.d_hidden;
  driver::ScopedContext scope(context.get());
  driver::Stream stream = driver::Stream::create();
  driver::DeviceBuffer x(elements * 2), out(elements * 2), flush(kFlushBytes);
  const std::vector<std::uint16_t> x_host = random_activations(config.dtype, elements);
  x.upload(x_host.data(), elements * 2);

  // The heuristic tile first: its output is what every other candidate must reproduce.
  std::vector<GemmTile> order = {heuristic};
  for (const GemmTile& t : candidates) {
    if (!(t == heuristic)) order.push_back(t);
  }
  std::vector<std::uint16_t> reference, result(elements);
  cache::TuningRecord record;
  record.problem = tuning_problem(bucket);
  auto log_time = [&](const GemmTile& tile, double ms) {
    log().info("tuning bucket {} ({} tokens): {} {:.3f} ms", bucket.group_sum_max, T,
               tile.describe(), ms);
  };
  // First every candidate's plan, its first forward (the warm-up) and its output against the
  // heuristic's; those that fail are out, at +inf.
  struct Candidate {
    GemmTile tile;
    LaunchPlan plan;
  };
  std::vector<Candidate> timed;
  for (const GemmTile& tile : order) {
    try {
      LaunchPlan plan = build_plan(bucket, tile);
      ensure_workspace(plan.layout.bytes);
      RT_MOE_CALL(cuMemsetD8Async, out.get(), 0xFF, elements * 2, stream.get());
      enqueue(plan, x.as<void>(), out.as<void>(), T, stream.get());
      stream.synchronize();
      out.download(result.data(), elements * 2);
      if (reference.empty()) {
        reference = result;
      } else if (std::size_t bad = count_mismatches(config.dtype, result, reference); bad != 0) {
        throw Error(ErrorCode::kInternal,
                    fmt::format("{} elements differ from the heuristic tile's output", bad));
      }
      timed.push_back({tile, std::move(plan)});
    } catch (const Error& e) {
      if (tile == heuristic) throw;  // the default must work: this is a bug, not a slow tile
      log().warn("tuning bucket {}: tile {} failed: {}", bucket.group_sum_max, tile.describe(),
                 e.what());
      log_time(tile, std::numeric_limits<double>::infinity());
      record.candidates.push_back({tile.describe(), std::numeric_limits<double>::infinity()});
    }
  }
  // The heuristic's forwards back to back (timed[0] is the heuristic: it never fails here).
  const auto heat_start = std::chrono::steady_clock::now();
  for (int i = 1;; ++i) {
    enqueue(timed.front().plan, x.as<void>(), out.as<void>(), T, stream.get());
    if (i % 8 != 0) continue;
    stream.synchronize();
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - heat_start).count() >=
        kHeatSeconds) {
      break;
    }
  }
  driver::Event start = driver::create_event(), stop = driver::create_event();
  // In shuffled rounds, the slow candidates out after the first few (tuning_rounds.h).
  const std::vector<std::vector<double>> times = run_tuning_rounds(
      timed.size(), TuningRounds{}, [&](std::size_t candidate, int round, std::size_t position) {
        RT_MOE_CALL(cuMemsetD8Async, flush.get(), (round + int(position)) & 0xFF, kFlushBytes,
                    stream.get());
        RT_MOE_CALL(cuEventRecord, start.get(), stream.get());
        enqueue(timed[candidate].plan, x.as<void>(), out.as<void>(), T, stream.get());
        RT_MOE_CALL(cuEventRecord, stop.get(), stream.get());
        RT_MOE_CALL(cuEventSynchronize, stop.get());
        return double(driver::elapsed_ms(start.get(), stop.get()));
      });
  GemmTile best = heuristic;
  double best_ms = std::numeric_limits<double>::infinity(), heuristic_ms = best_ms;
  for (std::size_t i = 0; i < timed.size(); ++i) {
    const Candidate& c = timed[i];
    const double ms = median_of(times[i]);
    log_time(c.tile, ms);
    record.candidates.push_back({c.tile.describe(), ms});
    if (c.tile == heuristic) heuristic_ms = ms;
    if (ms < best_ms) {
      best_ms = ms;
      best = c.tile;
    }
  }
  tuning_store().record(record);
  log().info("tuned bucket {} in {:.1f} s: {} ({:.3f} ms; heuristic {} {:.3f} ms)",
             bucket.group_sum_max,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
             best.describe(), best_ms, heuristic.describe(), heuristic_ms);
  return best;
}

}  // namespace rt_moe
