#include "gpu_harness.h"

namespace rt_moe::test {

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

}  // namespace rt_moe::test
