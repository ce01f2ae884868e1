// One GPU forward checked against the CPU reference: routing against the reference decisions
// (with the one-ulp tie rule), outputs against the reference computed with the GPU's decisions,
// on every token or, for large T, on a sample of them (all rows are still checked for NaN, which
// is what the poison turns an unwritten element into; check_outputs() in gpu_harness.h).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "gpu_harness.h"
#include "reference.h"
#include "rt_moe/error.h"

namespace rt_moe::test {

// The code of the Error that `call` throws; kInternal when it throws nothing.
template <typename Call>
ErrorCode code_of(Call&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kInternal;
}

// The Error that `call` throws; kInternal and an empty message when it throws nothing.
template <typename Call>
std::pair<ErrorCode, std::string> error_of(Call&& call) {
  try {
    call();
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ErrorCode::kInternal, ""};
}

struct CheckResult {
  Comparison comparison;
  ForwardRun run;
};

// Runs one forward of `x` and checks it; prints one summary line.
inline CheckResult check_forward(MoeRuntime& moe, const HostWeights& weights,
                                 const std::vector<std::uint16_t>& x,
                                 const driver::DeviceBuffer& x_dev, driver::DeviceBuffer& out_dev,
                                 std::int64_t tokens, CUstream stream, const char* label) {
  const MoeConfig& c = moe.config();
  CheckResult result;
  result.run = run_forward(moe, x_dev, out_dev, tokens, stream);
  const ForwardRun& run = result.run;

  Routing ref_routing = reference_routing(c, x, weights.router, tokens, weights.router_bias);
  std::string routing_problem = check_routing(c, ref_routing, run.ids, run.weights);
  INFO(label << ": " << routing_problem);
  CHECK(routing_problem.empty());

  // The rule's atol (1e-2) is for outputs at the reference generator's scale. A routed scaling
  // factor s (DeepSeek-V2: 16) multiplies the routed slots, and with them the one error the
  // reference cannot mirror bit for bit: h rounded to the dtype where the GPU's fp32 sums, in
  // another order, land on the other side of a rounding boundary (one ulp of h, 0.4% in bf16).
  // Near cancellation that error is absolute, so it is judged at the output's own scale:
  // atol = 1e-2 * s, which is the plain rule applied to out / s.
  const double atol = 1e-2 * std::max(1.0, double(c.routing.routed_scaling_factor));
  const OutputCheck outputs = check_outputs(c, weights, x, tokens, run, atol);
  INFO(label << ": rows holding NaN (unwritten or wrong): " << outputs.nan_rows);
  CHECK(outputs.nan_rows == 0);

  result.comparison = outputs.comparison;
  std::printf("%-44s %-30s T=%-6lld checked %lld/%lld tokens: %s\n", label, c.describe().c_str(),
              (long long)tokens, (long long)outputs.tokens_checked, (long long)tokens,
              result.comparison.describe().c_str());
  INFO(label << ": " << result.comparison.describe());
  CHECK(result.comparison.pass);
  return result;
}

// Weights, activations and a runtime for one config, on the device.
struct Fixture {
  struct Context {
    Context() { use_primary_context(); }
  } context;
  MoeConfig config;
  HostWeights weights;
  DeviceWeights device_weights;
  MoeRuntime moe;
  driver::Stream stream;

  Fixture(const MoeConfig& c, std::uint64_t seed, const RuntimeOptions& options = {})
      : context(),
        config(c),
        weights(random_weights(c, seed)),
        device_weights(upload(weights)),
        moe(c, options),
        stream(driver::Stream::create()) {
    moe.prepare(device_weights.view());
  }

  // Generates x for `tokens`, runs and checks one forward.
  CheckResult check(std::int64_t tokens, std::uint64_t seed, const char* label) {
    std::vector<std::uint16_t> x = random_activations(config, tokens, seed);
    driver::DeviceBuffer x_dev = upload(x);
    driver::DeviceBuffer out_dev(
        std::max<std::size_t>(16, std::size_t(tokens) * config.d_hidden * 2));
    return check_forward(moe, weights, x, x_dev, out_dev, tokens, stream.get(), label);
  }
};

}  // namespace rt_moe::test
