#include "rt_moe/runtime.h"

#include <fmt/format.h>

#include <climits>
#include <future>
#include <map>
#include <mutex>
#include <vector>

#include "base/env.h"
#include "base/log.h"
#include "driver.h"
#include "kernels.h"
#include "params.h"
#include "plan.h"
#include "runtime_impl.h"
#include "specs.h"
#include "tma.h"

namespace rt_moe {
namespace {

// Row blocks per band of the TMA GEMMs' tile order (see LaunchPlan::tile_band). 12 rather than 8:
// a band of 8 cuts an expert of 9-12 row blocks (gpumode bench 2, ~8.5) in two, and the second
// band's tiles read the expert's weight tiles again (docs/PERF.md 21d's model: 4.31 GB from DRAM
// at band 8, 3.52 at 12). H200, bf16, three runs (22d): gpumode T = 8192 6.2073-6.2175 ms at 12
// against 6.2453-6.2492 at 8; DeepSeek-V3 T = 16384 (~4.5 row blocks an expert) the same.
constexpr int kDefaultTileBand = 12;
constexpr int kMaxTileBand = 1 << 20;

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

void check_pointer(const void* p, const char* name) {
  if (p == nullptr) {
    throw Error(ErrorCode::kInvalidArgument, fmt::format("{} is a null pointer", name));
  }
  if (!aligned16(p)) {
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("{} = {} is not 16-byte aligned (the kernels load 16-byte vectors)", name, p));
  }
}

// Throws Error(kInvalidArgument) when the memory the driver has allocated or mapped from `p` on,
// without a gap, ends before `bytes`: a buffer too small for the config's shape, which a kernel
// would read past. cuMemGetAddressRange names one allocation (cuMemAlloc, a caching allocator's
// block) or, for memory mapped with cuMemMap (PyTorch's expandable segments), one physical
// segment of it, so the walk goes on from each range's end while another one starts right there.
// Memory the driver does not know (system memory the GPU reads through HMM or ATS) is not
// checked. Needs the runtime's context current.
void check_extent(const void* p, std::int64_t bytes, const char* name, const char* shape) {
  const auto range_end = [](CUdeviceptr at, CUdeviceptr* end) {
    CUdeviceptr base = 0;
    std::size_t size = 0;
    if (driver::api().cuMemGetAddressRange(&base, &size, at) != CUDA_SUCCESS) return false;
    *end = base + size;
    return base <= at && at < *end;
  };
  const auto start = reinterpret_cast<CUdeviceptr>(p);
  const CUdeviceptr needed = start + CUdeviceptr(bytes);
  CUdeviceptr end = 0;
  if (!range_end(start, &end)) return;
  while (end < needed) {
    CUdeviceptr next = 0;
    if (!range_end(end, &next)) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{} = {}: the device memory allocated from it ends {} bytes on, "
                              "but {} needs {} bytes",
                              name, p, end - start, shape, bytes));
    }
    end = next;
  }
}

unsigned ceil_div(std::int64_t a, std::int64_t b) { return unsigned((a + b - 1) / b); }

// The launch order of each stage after the first kernel: overlapping the stage before wherever
// the arch has programmatic dependent launch (every stage kernel calls grid_dependency_wait()
// before it touches memory).
LaunchOrder stage_order(const std::string& arch) {
  return has_programmatic_launch(arch) ? LaunchOrder::kProgrammatic : LaunchOrder::kSerial;
}

}  // namespace

const LaunchPlan& MoeRuntime::Impl::plan_for(std::int64_t tokens, bool capturing) {
  Bucket bucket = bucket_for(config, tokens);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = plans.find(bucket.group_sum_max); it != plans.end()) {
    if (capturing) {
      experts_captured = true;
      workspace_captured = true;
    }
    return it->second;
  }
  if (capturing) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("forward of {} tokens during stream capture needs bucket {} (up to "
                            "{} tokens), which is not loaded yet: call reserve({}) before "
                            "capturing",
                            tokens, bucket.group_sum_max, bucket.max_tokens, tokens));
  }
  LaunchPlan plan = build_plan(bucket, choose_tile(bucket));
  ensure_workspace(plan.layout.bytes);
  log().debug(
      "plan for bucket {} (<= {} tokens): tile {}, shared expert prefetch {} B a row, counters "
      "at {:#x} ({} B), workspace at {:#x} ({} B)",
      bucket.group_sum_max, bucket.max_tokens, plan.tile.describe(), plan.shared_prefetch,
      std::uint64_t(plan.counters.get()), plan.counters.bytes(), std::uint64_t(workspace.get()),
      workspace.bytes());
  return plans.emplace(bucket.group_sum_max, std::move(plan)).first->second;
}

LaunchPlan MoeRuntime::Impl::build_plan(const Bucket& bucket, const GemmTile& tile) {
  LaunchPlan plan;
  plan.bucket = bucket;
  plan.tile = tile;
  plan.router_tile = router_tile(config, bucket.max_tokens, tile.sm == 90);
  plan.route_decode = uses_route_decode(plan.tile, bucket.max_tokens);
  std::vector<KernelSpec> specs = forward_specs(config, plan.tile, bucket.max_tokens);
  // Compile (or load from disk) all stages in parallel; module loads then happen here.
  std::vector<std::future<CompiledCubin>> compiled;
  for (const KernelSpec& spec : specs) {
    compiled.push_back(std::async(std::launch::async, [&spec, this] {
      return compile_cubin(spec, kernels->arch(), kernels->cubins());
    }));
  }
  for (auto& f : compiled) f.get();
  std::vector<const Kernel*> loaded;
  for (const KernelSpec& spec : specs) loaded.push_back(&kernels->get(spec));
  plan.router = loaded[0];
  plan.topk = loaded[1];
  plan.offsets = loaded[2];
  plan.scatter = loaded[3];
  plan.gate_up = loaded[4];
  plan.down = loaded[5];
  plan.combine = loaded[6];
  plan.layout = workspace_layout(config, bucket.max_tokens, plan.tile.block_m, plan.tile.fused);
  {
    // Zero before the plan's first forward; each forward's combine zeroes them again.
    const std::vector<int> zeros(plan.layout.counters.ints, 0);
    driver::ScopedContext scope(context.get());
    plan.counters = driver::DeviceBuffer(zeros.size() * sizeof(int));
    plan.counters.upload(zeros.data(), zeros.size() * sizeof(int));
  }
  if (plan.tile.fused && config.n_shared_experts > 0) {
    const std::vector<int> table = shared_rows_table(config, plan.layout.shared_chunk_blocks);
    driver::ScopedContext scope(context.get());
    plan.shared_table = driver::DeviceBuffer(table.size() * sizeof(int));
    plan.shared_table.upload(table.data(), table.size() * sizeof(int));
  }
  if (plan.tile.ws) {
    // Persistent grid: as many blocks (clusters) as can be resident at once.
    const Kernel& k = *plan.gate_up;
    int resident = 0;
    if (plan.tile.cluster > 1) {
      const unsigned cluster = unsigned(plan.tile.cluster);
      LaunchAttributes attributes(LaunchOrder::kSerial, cluster);
      const CUlaunchConfig config =
          launch_config(k, {cluster * unsigned(device.sm_count)}, nullptr, attributes);
      RT_MOE_CALL(cuOccupancyMaxActiveClusters, &resident, k.function, &config);
      resident *= plan.tile.cluster;
    } else {
      RT_MOE_CALL(cuOccupancyMaxActiveBlocksPerMultiprocessor, &resident, k.function, k.threads,
                  std::size_t(k.smem_bytes));
      resident *= device.sm_count;
    }
    if (resident < plan.tile.cluster) {
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: no block (cluster of {}) fits on the GPU ({} threads, {} B "
                              "shared)",
                              k.name, plan.tile.cluster, k.threads, k.smem_bytes));
    }
    plan.gemm_ctas = unsigned(resident);
    // The readers of a weight tile are at most this many consecutive tiles, those of a row
    // block's A rows this many tiles apart: small enough for both to stay in L2 (tile_of in
    // grouped_gemm_sm90_ws.cuh).
    plan.tile_band = tile_band > 0 ? tile_band : kDefaultTileBand;
  } else if (!plan.tile.gemv && !plan.tile.fused && plan.tile.sm == 80) {
    plan.shared_prefetch = shared_prefetch_bytes(plan);
  }
  return plan;
}

// GemmParams::shared_prefetch for the mma.sync gate/up kernel: while the routing runs, the gate/up
// blocks, launched early and waiting for it, can fetch the start of the shared expert's gate and
// up rows into L2, as the shared expert's rows do not depend on the routing. Only where it pays
// and is safe to count on:
//   - every expert fits one row block (the bucket's tokens <= block_m), so the routed weights
//     stream through L2 once, marked evict-first (TileLoader), and do not evict the prefetched
//     lines before the shared expert's blocks read them;
//   - the whole grid is resident at once, so every block prefetches during the routing and none
//     repeats it later.
// Half of L2 at most, spread over the rows' starts (DeepSeek-V3 on the H200: 4096 rows of 14 KB,
// 6 KB of each).
int MoeRuntime::Impl::shared_prefetch_bytes(const LaunchPlan& plan) const {
  const MoeConfig& c = config;
  if (c.n_shared_experts == 0 || plan.bucket.max_tokens > plan.tile.block_m) return 0;
  const Kernel& k = *plan.gate_up;
  int per_sm = 0;
  RT_MOE_CALL(cuOccupancyMaxActiveBlocksPerMultiprocessor, &per_sm, k.function, k.threads,
              std::size_t(k.smem_bytes));
  const std::int64_t grid = max_row_blocks(c, plan.bucket.max_tokens, plan.tile.block_m) *
                            gate_up_col_blocks(c, plan.tile.block_n);
  if (grid > std::int64_t(per_sm) * device.sm_count) return 0;
  const std::int64_t rows = 2 * c.n_shared_experts * c.d_expert;
  const std::int64_t row_bytes = c.d_hidden * dtype_bytes(c.dtype);
  const std::int64_t prefix = std::min(row_bytes, std::int64_t(device.l2_bytes) / 2 / rows);
  return int(prefix / 128 * 128);
}

void MoeRuntime::Impl::ensure_workspace(std::size_t bytes) {
  if (bytes <= workspace.bytes()) return;
  driver::ScopedContext scope(context.get());
  if (workspace_captured) {
    // A captured graph replays with the old workspace's addresses: freeing it would leave the
    // graph reading and writing memory that is no longer its own.
    log().warn(
        "workspace grown from {:.1f} to {:.1f} MiB after CUDA graphs captured forwards "
        "with the old one, which is kept for them until the runtime is destroyed; "
        "reserve() the largest token count before capturing to avoid this",
        workspace.bytes() / 1048576.0, bytes / 1048576.0);
    retired.push_back(std::move(workspace));
    workspace_captured = false;
  } else {
    RT_MOE_CALL(cuCtxSynchronize);
    workspace.reset();
  }
  workspace = driver::DeviceBuffer(bytes);
  log().debug("workspace grown to {:.1f} MiB at {:#x}", bytes / 1048576.0,
              std::uint64_t(workspace.get()));
}

void MoeRuntime::Impl::enqueue_routing(const LaunchPlan& plan, const void* x, int T,
                                       int* count_lines, int* counts, CUstream stream) {
  const MoeConfig& c = config;
  const WorkspaceLayout& l = plan.layout;
  const CUdeviceptr ws = workspace.get();
  auto ptr = [ws](std::size_t offset) { return reinterpret_cast<void*>(ws + offset); };
  const std::int64_t E = c.n_routed_experts;
  const LaunchOrder order = stage_order(kernels->arch());

  // No memset: the counters are zero (LaunchPlan::counters). Every stage overlaps its launch with
  // the work before it on sm_90 and newer, the router too (after the caller's kernel, or the last
  // forward's combine); the router waits before it lets the next stages launch (routing.cuh).
  if (plan.router_tile.block_m == 0) {
    RouterParams params{x, router, static_cast<float*>(ptr(l.logits)), T};
    // kRouterSplit warps a router row while one warp a row would leave SMs idle (DeepSeek-V3 on
    // 132 SMs: T <= 16); the kernel reads the layout from the grid's height.
    const unsigned token_blocks = ceil_div(T, kRouterTokensPerBlock);
    const unsigned whole_rows = ceil_div(E, kRouterWarps);
    const bool split = std::int64_t(token_blocks) * whole_rows < device.sm_count;
    launch(*plan.router,
           {token_blocks, split ? ceil_div(E, kRouterWarps / kRouterSplit) : whole_rows}, params,
           stream, order);
  } else {
    GemmParams params{};
    params.a = x;
    params.out = ptr(l.logits);
    params.b = router;
    params.tokens = T;
    // Split along K, the parts are fp32 partial sums: the top-k kernel adds and rounds them.
    const unsigned split = unsigned(plan.router_tile.split);
    params.round_logits = c.routing.logits_fp32 || split > 1 ? 0 : 1;
    launch(*plan.router,
           {ceil_div(T, plan.router_tile.block_m), ceil_div(E, plan.router_tile.block_n), split},
           params, stream, order);
  }

  TopkParams topk{};
  topk.logits = static_cast<const float*>(ptr(l.logits));
  topk.bias = router_bias;
  topk.topk_ids = static_cast<int*>(ptr(l.topk_ids));
  topk.topk_weights = static_cast<float*>(ptr(l.topk_weights));
  topk.count_lines = count_lines;
  topk.tokens = T;
  topk.routed_scaling_factor = c.routing.routed_scaling_factor;
  topk.logit_splits = plan.router_tile.block_m == 0 ? 1 : plan.router_tile.split;
  topk.round_logits = c.routing.logits_fp32 ? 0 : 1;
  if (plan.route_decode) {
    // One block for top-k and the dispatch: a warp a token.
    launch(*plan.topk, {1}, RouteDecodeParams{topk, offsets_params(plan, T, count_lines, counts)},
           stream, order);
  } else {
    launch(*plan.topk, {ceil_div(T, kTopkWarps)}, topk, stream, order);
  }
}

OffsetsParams MoeRuntime::Impl::offsets_params(const LaunchPlan& plan, int T,
                                               const int* count_lines, int* counts) const {
  const WorkspaceLayout& l = plan.layout;
  const CUdeviceptr ws = workspace.get();
  auto ptr = [ws](std::size_t offset) { return reinterpret_cast<int*>(ws + offset); };
  return {count_lines,
          counts,
          ptr(l.fill),
          ptr(l.padded_offsets),
          ptr(l.block_expert),
          ptr(l.num_blocks),
          ptr(l.sorted_rows),
          T,
          int(max_row_blocks(config, T, plan.tile.block_m))};
}

void MoeRuntime::Impl::enqueue(const LaunchPlan& plan, const void* x, void* out, int T,
                               CUstream stream) {
  // A forward that threw after launching some of its stages may have left counts in the counters
  // that no combine zeroed: the next forward of the plan zeroes them first.
  if (plan.counters_dirty) {
    RT_MOE_CALL(cuMemsetD32Async, plan.counters.get(), 0, plan.layout.counters.ints, stream);
    plan.counters_dirty = false;
  }
  try {
    enqueue_stages(plan, x, out, T, stream);
  } catch (...) {
    plan.counters_dirty = true;
    throw;
  }
}

void MoeRuntime::Impl::enqueue_stages(const LaunchPlan& plan, const void* x, void* out, int T,
                                      CUstream stream) {
  const MoeConfig& c = config;
  const WorkspaceLayout& l = plan.layout;
  const CUdeviceptr ws = workspace.get();
  auto ptr = [ws](std::size_t offset) { return reinterpret_cast<void*>(ws + offset); };
  const std::int64_t slots = c.top_k + c.n_shared_experts;
  const CUdeviceptr counters = plan.counters.get();
  auto counter = [counters](std::size_t offset) {
    return reinterpret_cast<int*>(counters + offset);
  };
  const CounterLayout& n = l.counters;

  enqueue_routing(plan, x, T, counter(n.count_lines), counter(n.counts), stream);
  const std::int64_t blocks = max_row_blocks(c, T, plan.tile.block_m);
  const LaunchOrder order = stage_order(kernels->arch());
  if (!plan.route_decode) {  // else the decode routing kernel did the dispatch
    launch(*plan.offsets, {1}, offsets_params(plan, T, counter(n.count_lines), counter(n.counts)),
           stream, order);
    ScatterParams scatter{static_cast<const int*>(ptr(l.topk_ids)),
                          static_cast<const int*>(ptr(l.padded_offsets)),
                          static_cast<int*>(ptr(l.fill)),
                          static_cast<int*>(ptr(l.sorted_rows)),
                          counter(n.counts),
                          T};
    launch(*plan.scatter, {ceil_div(T * slots, kScatterThreads)}, scatter, stream, order);
  }

  GemmParams gate_up{};
  gate_up.a = x;
  gate_up.out = ptr(l.h);
  gate_up.experts = experts.as<const ExpertWeights>();
  gate_up.sorted_rows = static_cast<const int*>(ptr(l.sorted_rows));
  gate_up.block_expert = static_cast<const int*>(ptr(l.block_expert));
  gate_up.num_blocks = static_cast<const int*>(ptr(l.num_blocks));
  gate_up.padded_offsets = static_cast<const int*>(ptr(l.padded_offsets));
  gate_up.topk_weights = static_cast<const float*>(ptr(l.topk_weights));
  gate_up.expert_counts = counter(n.counts);
  gate_up.tokens = T;
  gate_up.shared_prefetch = plan.shared_prefetch;
  GemmParams down = gate_up;
  down.shared_prefetch = 0;
  down.a = ptr(l.h);
  down.out = ptr(l.y);
  const auto gate_up_cols = unsigned(gate_up_col_blocks(c, plan.tile.block_n));
  const unsigned down_cols = ceil_div(c.d_hidden, plan.tile.block_n);
  if (plan.tile.ws) {
    // Persistent: at most one block per tile, at most as many as fit on the GPU at once; a
    // cluster of `cluster` blocks takes that many row blocks of one column block.
    const unsigned cluster = unsigned(plan.tile.cluster);
    const unsigned row_groups = ceil_div(blocks, cluster) * cluster;
    GemmTmaParams tma_gate_up{};
    weight_tensor_maps(c, weights, plan.tile.block_n, false, tma_gate_up);
    tma_gate_up.gemm = gate_up;
    tma_gate_up.tile_counter = counter(n.tile_counters);
    tma_gate_up.band = plan.tile_band;
    if (plan.tile.swap) {
      // The down GEMM starts on the SMs gate/up's last tiles leave (grouped_gemm_sm90_swap.cuh).
      tma_gate_up.row_done = counter(n.gate_up_done);
      tma_gate_up.gate_up_started = counter(n.decode_ticket);
    }
    launch(*plan.gate_up, {std::min(row_groups * gate_up_cols, plan.gemm_ctas)}, tma_gate_up,
           stream, order, cluster);
    GemmTmaParams tma_down{};
    weight_tensor_maps(c, weights, plan.tile.block_n, true, tma_down);
    tma_down.a =
        tensor_map_2d(c.dtype, ptr(l.h), std::uint64_t(l.max_rows), std::uint64_t(c.d_expert),
                      std::uint64_t(c.d_expert), std::uint32_t(plan.tile.block_m), "h (workspace)");
    tma_down.gemm = down;
    tma_down.tile_counter = counter(n.tile_counters) + 1;
    tma_down.band = plan.tile_band;
    tma_down.row_done = tma_gate_up.row_done;
    tma_down.gate_up_started = tma_gate_up.gate_up_started;
    launch(*plan.down, {std::min(row_groups * down_cols, plan.gemm_ctas)}, tma_down, stream, order,
           cluster);
  } else if (plan.tile.fused) {
    // Both GEMMs in one kernel, a block a work item (grouped_gemm_decode.cuh).
    DecodeParams decode{};
    decode.gate_up = gate_up;
    decode.down = down;
    decode.shared_chunk_blocks = int(l.shared_chunk_blocks);
    if (c.n_shared_experts > 0) {
      const int* table = plan.shared_table.as<const int>();
      const std::int64_t rows = c.n_shared_experts * l.shared_chunk_blocks;
      decode.shared_gate_up = gate_up;
      decode.shared_gate_up.num_blocks = table;
      decode.shared_gate_up.block_expert = table + 1;
      decode.shared_gate_up.sorted_rows = table + 1 + rows;
      decode.shared_gate_up.out = ptr(l.shared_h);
      decode.shared_down = decode.shared_gate_up;
      decode.shared_down.a = ptr(l.shared_h);
      decode.shared_down.out = ptr(l.y);
    }
    decode.ticket = counter(n.decode_ticket);
    decode.gate_up_done = counter(n.gate_up_done);
    decode.shared_done = counter(n.shared_done);
    decode.shared_partials = reinterpret_cast<float*>(ptr(l.shared_partials));
    decode.shared_part_counts = counter(n.shared_part_counts);
    // Enough blocks for every item: a down tile is plan.tile.split items, a shared gate/up tile
    // plan.tile.shared_parts.
    const unsigned shared_extra = unsigned(c.n_shared_experts * l.shared_chunk_blocks) *
                                  gate_up_cols * unsigned(plan.tile.shared_parts - 1);
    launch(
        *plan.gate_up,
        {unsigned(blocks) * (gate_up_cols + down_cols * unsigned(plan.tile.split)) + shared_extra},
        decode, stream, order);
  } else {
    launch(*plan.gate_up, {unsigned(blocks), gate_up_cols}, gate_up, stream, order);
    launch(*plan.down, {unsigned(blocks), down_cols}, down, stream, order);
  }

  CombineParams combine{ptr(l.y), out, T, counter(0), int(n.ints)};
  launch(*plan.combine, {combine_blocks(T, c.d_hidden, c.y_dtype)}, combine, stream, order);
}

MoeRuntime::MoeRuntime(const MoeConfig& config, const RuntimeOptions& options)
    : impl_(std::make_unique<Impl>()) {
  config.validate();
  // Options first, before the device is touched: bad values fail the same with or without a GPU.
  if (options.tile_band < 0 || options.tile_band > kMaxTileBand) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("tile_band = {}: want 0 (the default) to {} row blocks",
                            options.tile_band, kMaxTileBand));
  }
  impl_->config = config;
  int count = 0;
  RT_MOE_CALL(cuDeviceGetCount, &count);
  if (options.device < 0 || options.device >= count) {
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("device = {} but {} CUDA device(s) are visible", options.device, count));
  }
  impl_->context = driver::PrimaryContext(options.device);
  impl_->device = driver::device_info(options.device);
  if (impl_->device.cc_major < 8) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{} is sm_{}{}: rt_moe needs sm_80 or newer (mma.sync bf16)",
                            impl_->device.name, impl_->device.cc_major, impl_->device.cc_minor));
  }
  std::string arch = options.arch.empty() ? impl_->device.arch() : options.arch;
  impl_->tuning = options.tuning;
  impl_->pinned_tile = options.tile;
  impl_->tile_band = options.tile_band;
  if (impl_->tuning == RuntimeOptions::Tuning::kStored && env().tune) {
    impl_->tuning = RuntimeOptions::Tuning::kTune;
  }
  impl_->kernels = std::make_unique<KernelCache>(impl_->context.get(), arch);
  log().debug("MoeRuntime on {} ({}, {} SMs): {}", impl_->device.name, arch, impl_->device.sm_count,
              config.describe());
}

MoeRuntime::~MoeRuntime() = default;
MoeRuntime::MoeRuntime(MoeRuntime&&) noexcept = default;
MoeRuntime& MoeRuntime::operator=(MoeRuntime&&) noexcept = default;

const MoeConfig& MoeRuntime::config() const { return impl_->config; }

void MoeRuntime::prepare(const MoeWeights& w) {
  const MoeConfig& c = impl_->config;
  const std::int64_t H = c.d_hidden, I = c.d_expert, E = c.n_routed_experts;
  const std::int64_t S = c.n_shared_experts, bytes = dtype_bytes(c.dtype);
  // Every weight the config reads, with its size: the shared expert's only when S > 0, the
  // correction bias (read only by the routing kernel) only when the config uses it.
  struct Weight {
    const void* p;
    const char* name;
    std::int64_t bytes;
    const char* shape;
  };
  std::vector<Weight> weights = {{w.router, "weights.router", E * H * bytes, "[E, H]"},
                                 {w.gate, "weights.gate", E * I * H * bytes, "[E, I, H]"},
                                 {w.up, "weights.up", E * I * H * bytes, "[E, I, H]"},
                                 {w.down, "weights.down", E * H * I * bytes, "[E, H, I]"}};
  if (S > 0) {
    weights.push_back({w.shared_gate, "weights.shared_gate", S * I * H * bytes, "[S*I, H]"});
    weights.push_back({w.shared_up, "weights.shared_up", S * I * H * bytes, "[S*I, H]"});
    weights.push_back({w.shared_down, "weights.shared_down", H * S * I * bytes, "[H, S*I]"});
  }
  if (c.routing.correction_bias) {
    weights.push_back(
        {w.router_bias, "weights.router_bias", E * std::int64_t(sizeof(float)), "[E] fp32"});
  }
  for (const Weight& weight : weights) check_pointer(weight.p, weight.name);
  auto at = [bytes](const void* base, std::int64_t elements) {
    return static_cast<const char*>(base) + elements * bytes;
  };
  std::vector<ExpertWeights> table(E + S);
  for (std::int64_t e = 0; e < E; ++e) {
    table[e] = {at(w.gate, e * I * H), at(w.up, e * I * H), at(w.down, e * H * I), I};
  }
  for (std::int64_t j = 0; j < S; ++j) {
    // Chunk j of the shared expert: gate/up rows [j*I, (j+1)*I), down columns [j*I, (j+1)*I).
    table[E + j] = {at(w.shared_gate, j * I * H), at(w.shared_up, j * I * H),
                    at(w.shared_down, j * I), S * I};
  }
  driver::ScopedContext scope(impl_->context.get());
  for (const Weight& weight : weights) {
    check_extent(weight.p, weight.bytes, weight.name, weight.shape);
  }
  // Forwards in flight (on any stream) finish with the weights they were enqueued with; after
  // this the caller may free those.
  if (impl_->prepared) RT_MOE_CALL(cuCtxSynchronize);
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->experts_captured) {
      // A captured graph reads the table at its address, with the router and the tensor maps of
      // the weights prepared then (kernel parameters, copied at capture): it keeps the whole of
      // those weights only if the table stays as it was.
      impl_->retired.push_back(std::move(impl_->experts));
      impl_->experts_captured = false;
    }
    if (impl_->experts.bytes() != table.size() * sizeof(ExpertWeights)) {
      impl_->experts = driver::DeviceBuffer(table.size() * sizeof(ExpertWeights));
    }
  }
  impl_->experts.upload(table.data(), table.size() * sizeof(ExpertWeights));
  impl_->weights = w;
  impl_->router = w.router;
  impl_->router_bias = c.routing.correction_bias ? w.router_bias : nullptr;
  impl_->prepared = true;
}

void MoeRuntime::reserve(std::int64_t max_tokens) {
  if (max_tokens < 1 || max_tokens > impl_->max_tokens()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("reserve: max_tokens = {} must be in [1, {}]", max_tokens,
                            impl_->max_tokens()));
  }
  for (const Bucket& b : bucket_ladder(impl_->config, max_tokens)) {
    impl_->plan_for(b.max_tokens, false);
  }
}

void MoeRuntime::forward(const void* x, void* out, std::int64_t tokens, CUstream_st* stream) {
  Impl& m = *impl_;
  if (tokens < 0 || tokens > m.max_tokens()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("forward: tokens = {} must be in [0, {}]", tokens, m.max_tokens()));
  }
  if (tokens == 0) return;
  if (!m.prepared) {
    throw Error(ErrorCode::kInvalidArgument, "forward before prepare(): no weights are set");
  }
  check_pointer(x, "x");
  check_pointer(out, "out");
  driver::ScopedContext scope(m.context.get());
  const bool capturing = driver::check_stream_context(stream, m.context.get(), "forward");
  const LaunchPlan& plan = m.plan_for(tokens, capturing);
  m.enqueue(plan, x, out, int(tokens), stream);
  m.last_plan = &plan;
  m.last_tokens = tokens;
}

void MoeRuntime::route(const void* x, std::int64_t tokens, CUstream_st* stream) {
  Impl& m = *impl_;
  if (tokens < 0 || tokens > m.max_tokens()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("route: tokens = {} must be in [0, {}]", tokens, m.max_tokens()));
  }
  if (tokens == 0) return;
  if (!m.prepared) {
    throw Error(ErrorCode::kInvalidArgument, "route before prepare(): no weights are set");
  }
  check_pointer(x, "x");
  driver::ScopedContext scope(m.context.get());
  const bool capturing = driver::check_stream_context(stream, m.context.get(), "route");
  const LaunchPlan& plan = m.plan_for(tokens, capturing);
  // Its own count lines, zeroed here (no combine follows to zero the plan's counters again), and
  // counts after them.
  const std::size_t lines = std::size_t(m.config.n_routed_experts) * kCounterStride;
  const CUdeviceptr count_lines = m.workspace.get() + plan.layout.route_counts;
  RT_MOE_CALL(cuMemsetD32Async, count_lines, 0, lines, stream);
  m.enqueue_routing(plan, x, int(tokens), reinterpret_cast<int*>(count_lines),
                    reinterpret_cast<int*>(count_lines + lines * sizeof(int)), stream);
  m.last_plan = &plan;
  m.last_tokens = tokens;
}

MoeRuntime::RoutingView MoeRuntime::last_routing() const {
  const Impl& m = *impl_;
  if (m.last_plan == nullptr) return {};
  const CUdeviceptr ws = m.workspace.get();
  return {reinterpret_cast<const std::int32_t*>(ws + m.last_plan->layout.topk_ids),
          reinterpret_cast<const float*>(ws + m.last_plan->layout.topk_weights), m.last_tokens};
}

std::vector<MoeRuntime::StageSpan> MoeRuntime::stage_timeline(std::int64_t tokens) {
  if (!env().stage_timeline) {
    throw Error(
        ErrorCode::kInvalidArgument,
        "stage_timeline: the kernels record no timeline; set RT_MOE_STAGE_TIMELINE=1 in the "
        "environment before the process loads them");
  }
  const Bucket b = bucket_for(impl_->config, std::max<std::int64_t>(tokens, 1));
  std::vector<std::pair<const char*, const Kernel*>> kernels;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    auto it = impl_->plans.find(b.group_sum_max);
    if (it == impl_->plans.end()) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("stage_timeline({}): bucket {} has no plan yet (run a forward of "
                              "its size first)",
                              tokens, b.group_sum_max));
    }
    const LaunchPlan& p = it->second;
    kernels = {{"router", p.router},   {"topk", p.topk},       {"offsets", p.offsets},
               {"scatter", p.scatter}, {"gate_up", p.gate_up}, {"down", p.down},
               {"combine", p.combine}};
  }
  driver::ScopedContext scope(impl_->context.get());
  RT_MOE_CALL(cuCtxSynchronize);
  std::vector<StageSpan> spans;
  const std::vector<std::uint64_t> cleared = cleared_timeline();
  std::vector<std::uint64_t> words(cleared.size());
  for (const auto& [stage, kernel] : kernels) {
    if (kernel == nullptr || kernel->timeline == 0) continue;
    RT_MOE_CALL(cuMemcpyDtoH, words.data(), kernel->timeline, kTimelineBytes);
    RT_MOE_CALL(cuMemcpyHtoD, kernel->timeline, cleared.data(), kTimelineBytes);
    const auto [start, end] = reduce_timeline(words);
    if (start != ~std::uint64_t(0)) spans.push_back({stage, start, end});
  }
  return spans;
}

std::string MoeRuntime::describe(std::int64_t tokens) const {
  const MoeConfig& c = impl_->config;
  Bucket b = bucket_for(c, std::max<std::int64_t>(tokens, 1));
  // The built plan's tile; before the bucket's first forward, the pinned tile (which the plan
  // will take, or the forward fails naming the candidates) or the heuristic one (the tuner may
  // still choose another).
  const GemmTile heuristic = default_tile(c, b.max_tokens, impl_->kernels->arch());
  std::string tile = impl_->pinned_tile.empty() ? heuristic.describe() : impl_->pinned_tile;
  GemmTile router = router_tile(c, b.max_tokens, heuristic.sm == 90);
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (auto it = impl_->plans.find(b.group_sum_max); it != impl_->plans.end()) {
      tile = it->second.tile.describe();
      router = it->second.router_tile;
    }
  }
  return fmt::format(
      "bucket {} (<= {} tokens): grouped GEMM {}, router {}", b.group_sum_max, b.max_tokens, tile,
      router.block_m == 0 ? std::string("cuda-core gemv") : "mma " + router.describe());
}

}  // namespace rt_moe
