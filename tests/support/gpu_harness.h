// Device-side helpers shared by the GPU tests and the benchmark: weights uploaded from the CPU
// reference's host copies, a forward run that poisons the output first and downloads it, and the
// check of its outputs against the CPU reference.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "driver.h"
#include "reference.h"
#include "rt_moe/runtime.h"

namespace rt_moe::test {

// Retains device 0's primary context for the process and makes it current on this thread (the
// same context MoeRuntime uses), so test buffers can be allocated before any runtime exists.
void use_primary_context();

struct DeviceWeights {
  driver::DeviceBuffer router, gate, up, down, shared_gate, shared_up, shared_down;
  driver::DeviceBuffer router_bias;  // fp32 [E]
  MoeWeights view() const;
};

DeviceWeights upload(const HostWeights& host);
driver::DeviceBuffer upload(const std::vector<std::uint16_t>& host);

// 0xFFFF is a NaN in fp16 and bf16: an output element the forward did not write shows as NaN.
inline constexpr std::uint16_t kPoison = 0xFFFF;

struct ForwardRun {
  std::vector<std::uint16_t> out;  // [T, H]
  std::vector<std::int32_t> ids;   // [T, k] the GPU's routing decisions
  std::vector<float> weights;      // [T, k]
};

// Poisons `out`, runs the forward on `stream`, synchronizes and downloads out and the routing.
ForwardRun run_forward(MoeRuntime& moe, const driver::DeviceBuffer& x, driver::DeviceBuffer& out,
                       std::int64_t tokens, CUstream stream);

// One forward of `tokens` captured on `stream` (its bucket must be loaded) and instantiated.
driver::GraphExec capture_forward(MoeRuntime& moe, const driver::DeviceBuffer& x,
                                  driver::DeviceBuffer& out, std::int64_t tokens, CUstream stream,
                                  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL);

struct OutputCheck {
  std::int64_t nan_rows = 0;        // rows holding NaN (unwritten or wrong), of all T rows
  std::int64_t tokens_checked = 0;  // rows compared with the reference
  Comparison comparison;
  bool pass() const { return nan_rows == 0 && comparison.pass; }
};

// The outputs of `run` (a forward of `x`, [T, H]) against the CPU reference computed with the
// run's own routing decisions. Every row is scanned for NaN, which is what the poison turns an
// unwritten element into; the reference computes all rows while that costs under ~40 GFLOP, else
// a fixed random sample that always holds the first and the last token. `atol` as in compare().
OutputCheck check_outputs(const MoeConfig& config, const HostWeights& weights,
                          std::span<const std::uint16_t> x, std::int64_t tokens,
                          const ForwardRun& run, double atol = 1e-2);

}  // namespace rt_moe::test
