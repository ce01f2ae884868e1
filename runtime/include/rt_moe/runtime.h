// MoeRuntime: the forward pass of one MoE layer on an NVIDIA GPU.
//
//   rt_moe::MoeRuntime moe(config);           // picks the device's exact arch (sm_90a on H200)
//   moe.prepare(weights);                     // device pointers, layouts of REFERENCE.md
//   moe.reserve(max_tokens);                  // optional: compile/load and size up front
//   moe.forward(x, out, tokens, stream);      // stream-ordered, no host sync, graph-capturable
//
// The runtime works in the device's primary context (the one the CUDA runtime uses), so pointers
// from cudaMalloc and streams from cudaStreamCreate can be passed as they are.
//
// One runtime's forwards share its scratch memory (the workspace) and counters, so they must not
// run at the same time on the GPU: enqueue them, and replay graphs captured from them, on one
// stream, or order the streams with events; use one runtime per layer and concurrent stream.
// Calls on one runtime must not overlap on the host either (one thread at a time, or a lock):
// a forward may grow the workspace that another thread's forward is enqueueing on. Different
// runtimes are independent, and share the process's kernel cache safely.
//
// A forward captured into a CUDA graph replays with what it was captured with: the workspace and
// the weights prepared then. Both stay alive for the graph however the runtime goes on: a later
// prepare() of other weights, or a forward of a bucket that needs a larger workspace (one not
// reserved before the capture, which logs a warning), keeps the old ones until the runtime is
// destroyed. A graph must not be replayed after its runtime is destroyed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rt_moe/config.h"
#include "rt_moe/error.h"

struct CUstream_st;  // cudaStream_t and CUstream are both CUstream_st*

namespace rt_moe {

// Device pointers in the layouts of ../shared/REFERENCE.md section 1 (nn.Linear: [out, in], K
// contiguous), all of the config's dtype except router_bias, each 16-byte aligned. The runtime
// reads them in place: `prepare` builds only a small table of per-expert pointers, so the weights
// must stay alive and unchanged while the runtime uses them.
struct MoeWeights {
  const void* router = nullptr;       // [E, H]
  const void* gate = nullptr;         // [E, I, H]
  const void* up = nullptr;           // [E, I, H]
  const void* down = nullptr;         // [E, H, I]
  const void* shared_gate = nullptr;  // [S*I, H], when S > 0
  const void* shared_up = nullptr;    // [S*I, H]
  const void* shared_down = nullptr;  // [H, S*I]
  // [E] fp32, when config.routing.correction_bias (DeepSeek-V3's e_score_correction_bias): added
  // to the scores to choose the experts, never to their weights. Ignored otherwise.
  const float* router_bias = nullptr;
};

struct RuntimeOptions {
  int device = 0;    // CUDA device ordinal
  std::string arch;  // compile target; empty: the device's exact arch
  // How a bucket's GEMM tile is chosen:
  //   kStored:    the tuning store's choice for this GPU and shape when there is one, else the
  //               heuristic default (the default; never measures anything);
  //   kHeuristic: always the heuristic default;
  //   kTune:      as kStored, but a bucket with no stored choice is tuned the first time it is
  //               used: every valid tile candidate is timed (that forward or reserve() then
  //               synchronizes), the fastest kept and recorded in the tuning store next to the
  //               kernel cache, which later processes reuse without tuning.
  // RT_MOE_TUNE=1 in the environment turns kStored into kTune.
  enum class Tuning { kStored, kHeuristic, kTune };
  Tuning tuning = Tuning::kStored;
  // Pins the grouped GEMM tile, by its description (e.g. "sm90ws 128x256x64 wg2 s4", as
  // describe() prints it), for every bucket; a bucket for which it is not a candidate throws
  // Error(kInvalidArgument) listing the candidates. Empty: chosen as `tuning` says. For
  // benchmarks and tests.
  std::string tile;
  // Row blocks per band of the tile order of the persistent (sm90ws) grouped GEMMs: the blocks
  // that read one weight tile are at most this many consecutive tiles. 0: the default (12). Any
  // value computes the same result; for benchmarks. Negative: Error(kInvalidArgument).
  int tile_band = 0;
};

class MoeRuntime {
 public:
  explicit MoeRuntime(const MoeConfig& config, const RuntimeOptions& options = {});
  ~MoeRuntime();
  MoeRuntime(MoeRuntime&&) noexcept;
  MoeRuntime& operator=(MoeRuntime&&) noexcept;

  // Validates the pointers and builds the expert table. Synchronous; call again to swap weights:
  // it first waits for the device's work, so forwards in flight finish with the old weights,
  // which the caller may free once it returns unless a graph captured before still replays them.
  void prepare(const MoeWeights& weights);

  // Loads (compiling on a cache miss) every kernel of the buckets up to `max_tokens` and sizes the
  // workspace for them, so later forwards allocate nothing: call before capturing a CUDA graph,
  // with the largest token count any forward of the runtime will have.
  void reserve(std::int64_t max_tokens);

  // out[T, H] = MoE(x[T, H]). T = 0 returns at once. Stream-ordered: no host synchronisation, no
  // allocation once the bucket was reserved or seen. Throws Error for bad arguments.
  void forward(const void* x, void* out, std::int64_t tokens, CUstream_st* stream);

  // The routing stages alone (gating GEMM, scores, top-k) for `tokens` tokens, into the
  // runtime's workspace: read the decisions with last_routing(). Stream-ordered like forward();
  // for expert-load statistics, debugging and timing the routing.
  void route(const void* x, std::int64_t tokens, CUstream_st* stream);

  // Device pointers to the routing decisions of the last forward ([T, k] expert ids and weights),
  // valid until the next forward. For tests and debugging.
  struct RoutingView {
    const std::int32_t* topk_ids = nullptr;
    const float* topk_weights = nullptr;
    std::int64_t tokens = 0;
  };
  RoutingView last_routing() const;

  // Diagnostics: with RT_MOE_STAGE_TIMELINE=1 in the environment when the kernels load, each
  // kernel records when its first block started and its last warp ended (%globaltimer, ns). This
  // returns those of the kernels of `tokens`' bucket (whose plan a forward built) since the last
  // call, and clears them: call it, run one forward (or graph replay), call it again. Synchronizes
  // the device. A kernel that did not run is left out. Error(kInvalidArgument) without the
  // variable, or before the bucket's first forward.
  struct StageSpan {
    std::string stage;  // "router", "topk", "offsets", "scatter", "gate_up", "down", "combine"
    std::uint64_t start_ns = 0, end_ns = 0;
  };
  std::vector<StageSpan> stage_timeline(std::int64_t tokens);

  const MoeConfig& config() const;
  // One line for logs and the benchmark: the bucket and the kernels a forward of `tokens` runs.
  std::string describe(std::int64_t tokens) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rt_moe
