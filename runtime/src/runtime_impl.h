// The inside of MoeRuntime: plans per bucket, the workspace, the launch sequence of one forward,
// and tuning. runtime.cpp holds the public methods; tuner.cpp the tuning.
#pragma once

#include <climits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "driver.h"
#include "kernels.h"
#include "params.h"
#include "plan.h"
#include "rt_moe/runtime.h"
#include "specs.h"
#include "tuning_store.h"

namespace rt_moe {

struct MoeRuntime::Impl {
  MoeConfig config;
  RuntimeOptions::Tuning tuning = RuntimeOptions::Tuning::kStored;
  std::string pinned_tile;  // RuntimeOptions::tile
  int tile_band = 0;        // RuntimeOptions::tile_band, validated
  driver::PrimaryContext context;
  driver::DeviceInfo device;
  std::unique_ptr<KernelCache> kernels;
  std::unique_ptr<cache::TuningStore> store;  // the tuning store, opened on first use
  driver::DeviceBuffer experts;               // ExpertWeights[E + S]
  MoeWeights weights;  // as prepared: the TMA path encodes tensor maps over them
  const void* router = nullptr;
  const float* router_bias = nullptr;  // [E] fp32, when config.routing.correction_bias
  bool prepared = false;
  driver::DeviceBuffer workspace;
  // Whether a forward or route() was captured into a CUDA graph since `experts` (prepare) and
  // `workspace` (growth) were last replaced: such a graph holds their addresses, so they are
  // then retired rather than freed or overwritten.
  bool experts_captured = false;
  bool workspace_captured = false;
  // Buffers that captured graphs may still read, kept until the runtime is destroyed.
  std::vector<driver::DeviceBuffer> retired;
  std::mutex mutex;  // guards plans, workspace growth, the captured flags and tuning
  std::map<std::int64_t, LaunchPlan> plans;  // by group_sum_max
  const LaunchPlan* last_plan = nullptr;
  std::int64_t last_tokens = 0;

  // Largest T such that every 32-bit index (pairs, sorted rows) stays in range.
  std::int64_t max_tokens() const {
    const std::int64_t slots = config.top_k + config.n_shared_experts;
    const std::int64_t experts = config.n_routed_experts + config.n_shared_experts;
    return (INT_MAX - experts * 256) / slots / 2;
  }

  // The plan of the bucket serving `tokens`: built on first use (tuned first when tuning is on,
  // or taken from the tuning store). `capturing`: the forward is being captured into a graph;
  // then it throws when the plan must be built, and marks the experts table and the workspace
  // captured.
  const LaunchPlan& plan_for(std::int64_t tokens, bool capturing);

  // Compiles (in parallel, through the cache) and loads every kernel of `tile` for `bucket`.
  LaunchPlan build_plan(const Bucket& bucket, const GemmTile& tile);
  // LaunchPlan::shared_prefetch of a plan with its kernels loaded (runtime.cpp says when).
  int shared_prefetch_bytes(const LaunchPlan& plan) const;
  // Grows the workspace to at least `bytes`. The old one is freed after synchronizing the context
  // (forwards in flight may use it), or retired when a graph captured it.
  void ensure_workspace(std::size_t bytes);
  // The dispatch's parameters (Offsets, and RouteDecode's offsets part) for `tokens` tokens:
  // top-k's count lines at `count_lines`, the expert counts stored to `counts`.
  OffsetsParams offsets_params(const LaunchPlan& plan, int tokens, const int* count_lines,
                               int* counts) const;
  // Enqueues the routing stages (gating GEMM, scores, top-k, counting into `count_lines`, E *
  // kCounterStride ints that must be zero) of `plan`; where plan.route_decode, the decode routing
  // kernel, which does the dispatch too, in place of top-k, and stores the counts to `counts`.
  void enqueue_routing(const LaunchPlan& plan, const void* x, int tokens, int* count_lines,
                       int* counts, CUstream stream);
  // Enqueues one forward of `plan` on `stream` (enqueue_stages), after zeroing the plan's counters
  // if a forward of it threw half-way (LaunchPlan::counters_dirty).
  void enqueue(const LaunchPlan& plan, const void* x, void* out, int tokens, CUstream stream);
  void enqueue_stages(const LaunchPlan& plan, const void* x, void* out, int tokens,
                      CUstream stream);

  // tuner.cpp: the tile for `bucket`: the stored choice, or (when tuning) the fastest candidate
  // measured now, or the heuristic default.
  GemmTile choose_tile(const Bucket& bucket);
  cache::TuningStore& tuning_store();
  std::string tuning_problem(const Bucket& bucket) const;
  GemmTile tune_bucket(const Bucket& bucket, const std::vector<GemmTile>& candidates);
};

}  // namespace rt_moe
