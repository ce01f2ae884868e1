#include "gpu_harness.h"

#include <algorithm>
#include <random>

namespace rt_moe::test {
namespace {

// Tokens whose outputs the CPU reference computes: all of them while that costs under ~40 GFLOP,
// else a random sample (the same every run) that always includes the first and the last token.
std::vector<std::int64_t> token_sample(const MoeConfig& c, std::int64_t tokens) {
  const double flops_per_token =
      6.0 * double(c.top_k + c.n_shared_experts) * double(c.d_hidden) * double(c.d_expert);
  const std::int64_t budget = std::max<std::int64_t>(64, std::int64_t(40e9 / flops_per_token));
  std::vector<std::int64_t> all(tokens);
  for (std::int64_t t = 0; t < tokens; ++t) all[t] = t;
  if (tokens <= budget) return all;
  std::mt19937_64 rng(99);
  std::shuffle(all.begin() + 1, all.end() - 1, rng);
  std::vector<std::int64_t> sample = {0, tokens - 1};
  sample.insert(sample.end(), all.begin() + 1, all.begin() + (budget - 1));
  std::sort(sample.begin(), sample.end());
  return sample;
}

}  // namespace

void use_primary_context() {
  static driver::PrimaryContext context(0);
  RT_MOE_CALL(cuCtxSetCurrent, context.get());
}

driver::DeviceBuffer upload(const std::vector<std::uint16_t>& host) {
  driver::DeviceBuffer buffer(std::max<std::size_t>(host.size() * 2, 16));
  buffer.upload(host.data(), host.size() * 2);
  return buffer;
}

DeviceWeights upload(const HostWeights& host) {
  DeviceWeights w;
  w.router = upload(host.router);
  w.gate = upload(host.gate);
  w.up = upload(host.up);
  w.down = upload(host.down);
  if (!host.shared_gate.empty()) {
    w.shared_gate = upload(host.shared_gate);
    w.shared_up = upload(host.shared_up);
    w.shared_down = upload(host.shared_down);
  }
  if (!host.router_bias.empty()) {
    w.router_bias = driver::DeviceBuffer(host.router_bias.size() * sizeof(float));
    w.router_bias.upload(host.router_bias.data(), host.router_bias.size() * sizeof(float));
  }
  return w;
}

MoeWeights DeviceWeights::view() const {
  auto p = [](const driver::DeviceBuffer& b) -> const void* {
    return b.bytes() == 0 ? nullptr : b.as<const void>();
  };
  return {p(router),      p(gate),      p(up),          p(down),
          p(shared_gate), p(shared_up), p(shared_down), static_cast<const float*>(p(router_bias))};
}

driver::GraphExec capture_forward(MoeRuntime& moe, const driver::DeviceBuffer& x,
                                  driver::DeviceBuffer& out, std::int64_t tokens, CUstream stream,
                                  CUstreamCaptureMode mode) {
  RT_MOE_CALL(cuStreamBeginCapture, stream, mode);
  moe.forward(x.as<const void>(), out.as<void>(), tokens, stream);
  CUgraph raw_graph = nullptr;
  RT_MOE_CALL(cuStreamEndCapture, stream, &raw_graph);
  driver::Graph graph(raw_graph);
  CUgraphExec raw_exec = nullptr;
  RT_MOE_CALL(cuGraphInstantiateWithFlags, &raw_exec, graph.get(), 0);
  return driver::GraphExec(raw_exec);
}

ForwardRun run_forward(MoeRuntime& moe, const driver::DeviceBuffer& x, driver::DeviceBuffer& out,
                       std::int64_t tokens, CUstream stream) {
  const MoeConfig& c = moe.config();
  const std::size_t out_elements = std::size_t(tokens) * c.d_hidden;
  RT_MOE_CALL(cuMemsetD8Async, out.get(), 0xFF, out_elements * 2, stream);
  moe.forward(x.as<const void>(), out.as<void>(), tokens, stream);
  RT_MOE_CALL(cuStreamSynchronize, stream);
  ForwardRun run;
  run.out.resize(out_elements);
  out.download(run.out.data(), out_elements * 2);
  MoeRuntime::RoutingView routing = moe.last_routing();
  run.ids.resize(std::size_t(tokens) * c.top_k);
  run.weights.resize(run.ids.size());
  if (tokens > 0) {
    RT_MOE_CALL(cuMemcpyDtoH, run.ids.data(), reinterpret_cast<CUdeviceptr>(routing.topk_ids),
                run.ids.size() * 4);
    RT_MOE_CALL(cuMemcpyDtoH, run.weights.data(),
                reinterpret_cast<CUdeviceptr>(routing.topk_weights), run.weights.size() * 4);
  }
  return run;
}

OutputCheck check_outputs(const MoeConfig& c, const HostWeights& weights,
                          std::span<const std::uint16_t> x, std::int64_t tokens,
                          const ForwardRun& run, double atol) {
  OutputCheck check;
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t n = 0; n < c.d_hidden; ++n) {
      const float v = bits_to_float(c.dtype, run.out[t * c.d_hidden + n]);
      if (!(v == v)) {
        ++check.nan_rows;
        break;
      }
    }
  }
  const std::vector<std::int64_t> sample = token_sample(c, tokens);
  const std::vector<float> ref =
      reference_forward(c, weights, x, tokens, run.ids, run.weights, sample);
  std::vector<std::uint16_t> out_sample(sample.size() * c.d_hidden);
  for (std::size_t i = 0; i < sample.size(); ++i) {
    std::copy_n(run.out.begin() + sample[i] * c.d_hidden, c.d_hidden,
                out_sample.begin() + i * c.d_hidden);
  }
  check.comparison = compare(c.dtype, out_sample, ref, c.d_hidden, atol, 1e-2);
  check.tokens_checked = std::int64_t(sample.size());
  return check;
}

}  // namespace rt_moe::test
