#include "specs.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "params.h"

namespace rt_moe {
namespace {

const char* dtype_tag(DType dtype) { return dtype == DType::kF16 ? "rt_moe::F16" : "rt_moe::BF16"; }

// The trailing template argument Y of a kernel that writes y (the down GEMMs, the fused decode
// GEMM) or reads it (the combine): none for fp32 y (the templates' default, so the fp32
// instances are spelled as before YDType existed), ", rt_moe::F16" for scaled fp16 (YOps).
std::string y_argument(const MoeConfig& c) {
  return c.y_dtype == YDType::kF16 ? ", rt_moe::F16" : "";
}

}  // namespace

std::string GemmTile::describe() const {
  if (gemv) return fmt::format("gemv r{} w{} s{}", block_m, warps_m, stages);
  if (fused) {
    return fmt::format("fused {}x{}x{} w1x{} s{}{}{}{}", block_m, block_n, block_k, warps_n, stages,
                       shared_down_last ? " sdl" : "", split > 1 ? fmt::format(" k{}", split) : "",
                       shared_parts > 1 ? fmt::format(" sp{}", shared_parts) : "");
  }
  if (swap) return fmt::format("sm90swap {}x{}x{} s{}", block_m, block_n, block_k, stages);
  if (sm == 90 && ws) {
    return fmt::format("sm90ws {}x{}x{} wg{} s{}{}{}", block_m, block_n, block_k, warps_m, stages,
                       cluster == 2 ? " c2" : "", staged_y ? " sy" : "");
  }
  if (sm == 90) {
    return fmt::format("sm90 {}x{}x{} wg{}x{} s{}{}", block_m, block_n, block_k, warps_m, warps_n,
                       stages, split > 1 ? fmt::format(" k{}", split) : "");
  }
  return fmt::format("sm80 {}x{}x{} w{}x{} s{}{}", block_m, block_n, block_k, warps_m, warps_n,
                     stages, split > 1 ? fmt::format(" k{}", split) : "");
}

bool has_wgmma(const std::string& arch) { return arch == "sm_90a"; }

bool has_tma_path(const MoeConfig& c, const std::string& arch) {
  return has_wgmma(arch) && c.d_hidden % 64 == 0 && c.d_expert % 64 == 0;
}

namespace {

// Rows of the average active expert when `max_tokens` tokens are routed uniformly.
long long rows_per_expert(const MoeConfig& c, long long max_tokens) {
  const long long slots = c.top_k + c.n_shared_experts;
  const long long experts = c.n_routed_experts + c.n_shared_experts;
  const long long pairs = max_tokens * slots;
  const long long active = std::max(1LL, std::min(experts, pairs));
  return (pairs + active - 1) / active;
}

// A GEMV tile (grouped_gemv.cuh): `rows` (8 or 16) token rows a block, `warps` warps splitting K,
// `stages` rounds of loads in flight.
GemmTile gemv_tile(int rows, int warps, int stages) {
  GemmTile t;
  t.block_m = rows;
  t.block_n = 16;
  t.block_k = 32;
  t.warps_m = warps;
  t.warps_n = 1;
  t.stages = stages;
  t.gemv = true;
  return t;
}

// A fused decode tile (grouped_gemm_decode.cuh): 16 rows, `block_n` B rows, `warps` warps,
// stages of `block_k` (64, or 128: 256 bytes of each weight row a stage).
GemmTile fused_tile(int block_n, int warps, int stages, bool shared_down_last = false,
                    int down_parts = 1, int shared_parts = 1, int block_k = 64) {
  GemmTile t{kFusedBlockM, block_n, block_k, 1, warps, stages, 80};
  t.fused = true;
  t.shared_down_last = shared_down_last;
  t.split = down_parts;
  t.shared_parts = shared_parts;
  return t;
}

// A swapped-operand tile (grouped_gemm_sm90_swap.cuh): `tokens` token rows a block, 256 weight
// rows, `stages` stages.
GemmTile swap_tile(int tokens, int stages) {
  GemmTile t{tokens, 256, 64, 2, 1, stages, 90, true};
  t.swap = true;
  return t;
}

// `t` with the down GEMM's y stores staged in shared memory (GemmTile::staged_y).
GemmTile staged_y(GemmTile t) {
  t.staged_y = true;
  return t;
}

}  // namespace

long long gate_up_col_blocks(const MoeConfig& c, int block_n) {
  return (c.d_expert + block_n / 2 - 1) / (block_n / 2);
}

int tile_smem_bytes(const GemmTile& t, YDType y_dtype) {
  if (t.gemv) return t.warps_m * (t.block_m / 8) * 4 * 32 * 4;  // the warps' partial sums
  const int ring = t.stages * (t.block_m + t.block_n) * t.block_k * 2;
  // + the consumer warps' staging (1 KB each of warps_m warpgroups: h, 16-bit y), barriers and
  // tile slots, each token row's pair and weight, alignment slack
  if (t.swap) return ring + t.warps_m * 4 * 1024 + t.stages * 20 + 8 + t.block_m * 8 + 1024;
  // + full/empty barriers, the pairs' tile-ready/free barriers, tile and broadcast slots, slack
  const auto ws_bytes = [&](int stages, int staging) {
    return stages * (t.block_m + t.block_n) * t.block_k * 2 + staging + 2 * stages * 8 + 4 * 8 +
           stages * 16 + 16 + 1024;
  };
  if (t.ws && t.staged_y) {
    // The down GEMM: 16 rows of half a tile's columns of y (+ 16 bytes) a consumer warp, and as
    // many stages as fit beside them, counted as the kernel's kFitStages; the gate/up GEMM as
    // without.
    const int staging = t.warps_m * 4 * 16 * (t.block_n / 2 * y_bytes(y_dtype) + 16);
    const int beside_ring = ws_bytes(t.stages, staging) - ring;  // staging, barriers, slack
    const int fit = (kMaxDynamicSmemSm90 - beside_ring) / ((t.block_m + t.block_n) * t.block_k * 2);
    return std::max(ws_bytes(t.stages, 0), ws_bytes(std::min(t.stages, fit), staging));
  }
  if (t.ws) return ws_bytes(t.stages, 0);
  return t.sm == 90 ? ring + 1024 : ring;  // sm90: slack to align tiles to 1024 bytes
}

std::vector<GemmTile> candidate_tiles(const MoeConfig& c, long long max_tokens,
                                      const std::string& arch, int max_smem) {
  const GemmTile heuristic = default_tile(c, max_tokens, arch);
  // Decode tiles trade width for depth: narrower B tiles make more, more even blocks for 132 SMs,
  // more stages keep more weight bytes in flight per block.
  std::vector<GemmTile> space = {
      {16, 128, 64, 1, 4, 4, 80}, {16, 128, 64, 1, 4, 6, 80}, {16, 64, 64, 1, 4, 8, 80},
      {32, 128, 64, 2, 2, 4, 80}, {64, 128, 64, 2, 2, 4, 80}, {128, 128, 64, 2, 4, 3, 80},
  };
  if (has_wgmma(arch)) {
    // warps_m x warps_n count warpgroups here.
    space.insert(space.end(), {{64, 128, 64, 1, 1, 4, 90},
                               {64, 256, 64, 1, 2, 4, 90},
                               {128, 128, 64, 2, 1, 4, 90},
                               {128, 256, 64, 2, 1, 3, 90},
                               {128, 256, 64, 2, 1, 4, 90}});
  }
  if (has_tma_path(c, arch)) {
    const GemmTile tma[] = {{64, 256, 64, 1, 1, 5, 90, true},
                            {128, 128, 64, 2, 1, 6, 90, true},
                            {128, 256, 64, 2, 1, 3, 90, true},
                            {128, 256, 64, 2, 1, 4, 90, true},
                            // 192 rows: an expert of up to 192 rows (DeepSeek-V3 at T = 4096:
                            // ~128) streams each weight tile through L2 to the SMs once.
                            {192, 192, 64, 3, 1, 4, 90, true},
                            {192, 128, 64, 3, 1, 5, 90, true},
                            {128, 128, 64, 2, 1, 6, 90, true, 2},
                            {128, 256, 64, 2, 1, 4, 90, true, 2},
                            // y through shared memory by the copy engine in the down GEMM.
                            staged_y({128, 256, 64, 2, 1, 4, 90, true}),
                            staged_y({128, 256, 64, 2, 1, 4, 90, true, 2}),
                            staged_y({192, 192, 64, 3, 1, 4, 90, true}),
                            // Tokens as the MMA's N: an expert of up to 128-160 rows is one
                            // block, its MMAs as wide as its rows rounded up to 8.
                            swap_tile(128, 4),
                            swap_tile(144, 4),
                            swap_tile(160, 4),
                            // Few rows an expert (DeepSeek-V3 at T = 512: ~18): narrow token
                            // tiles leave room for 5-6 stages of weights in flight.
                            swap_tile(32, 6),
                            swap_tile(64, 5)};
    // (Room first: GCC 12's -Warray-bounds misreads a reallocating insert of this list.)
    space.reserve(space.size() + std::size(tma));
    space.insert(space.end(), std::begin(tma), std::end(tma));
  }
  // The GEMV re-reads the weights (from L2) for every row block of an expert: a candidate while
  // the average expert fills one or two blocks. The fused decode kernel: one stream of weights.
  if (rows_per_expert(c, max_tokens) <= 16) {
    // The default (stages of 128, default_tile) and those it replaced (stages of 64).
    space.insert(space.end(), {fused_tile(64, 4, 4, true, 1, 1, 128), fused_tile(64, 4, 8),
                               fused_tile(64, 4, 10), fused_tile(128, 4, 4),
                               fused_tile(64, 4, 8, true), fused_tile(64, 4, 8, true, 2)});
    // The shared expert's gate/up tiles in K parts: more blocks stream while the routing runs.
    if (c.n_shared_experts > 0) {
      space.insert(space.end(),
                   {fused_tile(64, 4, 8, true, 1, 2), fused_tile(64, 4, 8, true, 1, 4)});
      // Stages of 256 bytes of each weight row (128 stream ~4% under contiguous bytes on an
      // H100, 256 within 0-1%: docs/PERF.md 58c), 4 or 5 of them (48 or 64 KiB of weights in
      // flight where the default has 56; 80 or 100 KiB a block: two blocks an SM still fit).
      space.insert(space.end(),
                   {fused_tile(64, 4, 4, true, 1, 2, 128), fused_tile(64, 4, 5, true, 1, 2, 128)});
    }
    for (int warps : {4, 8}) {
      for (int stages : {1, 2}) {
        space.push_back(gemv_tile(8, warps, stages));
        space.push_back(gemv_tile(16, warps, stages));
      }
    }
  }
  long long tall = 16;
  while (tall < rows_per_expert(c, max_tokens)) tall *= 2;
  std::vector<GemmTile> candidates;
  for (const GemmTile& t : space) {
    // A swapped tile multiplies only the rows a block has (rounded up to 8), not block_m.
    const bool fits_rows = t.swap ? rows_per_expert(c, max_tokens) > 16 : t.block_m <= 2 * tall;
    // The fused tile's K halves add into fp32 y with atomics.
    const bool fits_y = !(t.fused && t.split > 1) || c.y_dtype == YDType::kF32;
    if (t == heuristic || (tile_smem_bytes(t, c.y_dtype) <= max_smem && fits_rows && fits_y)) {
      candidates.push_back(t);
    }
  }
  if (std::find(candidates.begin(), candidates.end(), heuristic) == candidates.end()) {
    candidates.insert(candidates.begin(), heuristic);
  }
  return candidates;
}

GemmTile default_tile(const MoeConfig& c, long long max_tokens, const std::string& arch) {
  const long long rows = rows_per_expert(c, max_tokens);
  // Up to 16 rows: a stream of weight bytes. Up to 64 tokens, both GEMMs in one kernel
  // (grouped_gemm_decode.cuh); past that, and up to 16 rows, two kernels of the tile the fused one
  // had then: 16 x 64, 8 stages of 64 (56 KB of weights in flight a block, two blocks an SM).
  // H200, 2026-12-02, one call
  // (docs/PERF.md 10a), fused against two kernels: DeepSeek-V3 T = 1 0.1945 against 0.2139 ms,
  // 8 1.1928 / 1.2086, 64 4.4677 / 4.4711, but 128 5.0013 / 4.9611 and 256 5.2132 / 5.1628;
  // gpumode T = 1 0.1171 / 0.1405, 8 0.3993 / 0.4077, 64 0.6759 / 0.6791. The shared expert's
  // down tiles ticketed after the routed gate/up tiles ("sdl", 11b), against before them:
  // DeepSeek-V3 T = 1 0.1955 / 0.1975, 8 1.2219 / 1.2228, 64 4.5281 / 4.5715; gpumode 1, 8, 64
  // 0.1179 / 0.1178, 0.4055 / 0.4068, 0.6908 / 0.6917.
  if (rows <= 16) {
    if (max_tokens > 64) return GemmTile{16, 64, 64, 1, 4, 8};
    // The shared expert's gate/up tiles in two K parts ("sp2") where its items fill at most a
    // quarter of the first wave (~256 blocks, two an SM), so that half of it streams them while
    // the routing runs. H200, in turns with sp4 (docs/PERF.md 45a), DeepSeek-V3 T = 1 bf16:
    // whole tiles 1.009 / 1.008 x sp4, sp2 0.995 / 0.990; fp16 1.023 and 1.001; gpumode T = 1
    // 1.028 and 0.998; T = 8 whole 1.002-1.010, sp2 0.997-1.001.
    // Stages of 128 (256 bytes of each weight row, 4 of them: 48 KiB of weights in flight a
    // block), against the 8 stages of 64 before them: H100, in turns (docs/PERF.md 59b),
    // DeepSeek-V3 T = 1 0.980 / 0.981, T = 8 0.977 / 0.977; gpumode 0.978 / 0.980 and 0.976 /
    // 0.976 (both sp2); T = 64 2.0-3.2% faster, Qwen3-30B-A3B (no shared expert) T = 8 and 64
    // 2.3% and 1.5%, but T = 1 0.7-1.2% slower (59c; the tuner has the stages of 64 there).
    GemmTile t = fused_tile(64, 4, 4, true, 1, 1, 128);
    const long long shared_items = c.n_shared_experts *
                                   ((max_tokens + kFusedBlockM - 1) / kFusedBlockM) *
                                   gate_up_col_blocks(c, t.block_n);
    if (shared_items > 0 && shared_items * 4 <= 256) t.shared_parts = 2;
    return t;
  }
  // 17-64 rows: still weight-bound; the swapped tile of 64 token rows keeps 5 x 32 KB of weights
  // in flight per SM and multiplies only the block's rows rounded up to 8 (16 when measured;
  // DeepSeek-V3 on the H200, same call: T = 512 5.378 ms against 5.477 for sm90ws 64x256 s5, T =
  // 1024 5.561 against 5.631; gpumode T = 512, ~78 rows, tied; docs/PERF.md).
  if (rows <= 64 && has_tma_path(c, arch)) return swap_tile(64, 5);
  if (rows <= 32) return {32, 128, 64, 2, 2, 4};
  if (rows <= 64) return {64, 128, 64, 2, 2, 4};
  // 129-256 rows: tokens as the MMA's N, one or two blocks an expert, each weight tile streamed
  // once a block (DeepSeek-V3 T = 4096, ~143 rows: 7.44 against 8.54 ms for sm90ws 128x256 on the
  // H200, docs/PERF.md; at ~78, ~310 and more rows the two tied or the swapped tile lost).
  if (rows > 128 && rows <= 256 && has_tma_path(c, arch)) return swap_tile(160, 4);
  // 257-320 rows: the same with 144 token rows a block (two blocks hold 288). H200, steady clock
  // (docs/PERF.md 17): gpumode bench 1 (T = 2048, 311 rows) 1.880 against 1.963 ms for sm90ws
  // 128x256, DeepSeek-V3 T = 8192 (287 rows) 13.63 against 13.77; the tuner's steady rounds
  // picked it at gpumode 2048 too (16d).
  if (rows > 256 && rows <= 320 && has_tma_path(c, arch)) return swap_tile(144, 4);
  // 321-640 rows: 160 token rows a block. With an expert's rows spread evenly over its blocks
  // (EvenBlocks, in whole octets) an expert multiplies at most 7 padding rows, where the TMA tile's
  // 128-row blocks multiply the tail block's padding in full (11% more tiles at DeepSeek-V3 T =
  // 16384). H200, real routing, each order once (docs/PERF.md 24a): DeepSeek-V3 T = 16384 (574
  // rows) 24.43 / 23.96 ms against 24.66 / 24.84 for sm90ws 128x256 sy; at gpumode T = 8192 (1241
  // rows) it lost (6.36 / 6.36 against 6.27 / 6.22).
  if (rows > 320 && rows <= 640 && has_tma_path(c, arch)) return swap_tile(160, 4);
  // Past that the TMA kernel's 128 x 256 tile, its down GEMM's y staged in shared memory and
  // written by the copy engine ("sy": whole lines, 3 stages beside the staging). H200, fp16 y,
  // against the same tile with y stored from registers (docs/PERF.md 20b, two rounds each):
  // DeepSeek-V3 T = 16384 24.01 / 24.03 against 24.61 / 24.69 ms, gpumode T = 8192 6.374 /
  // 6.380 against 6.569 / 6.532 (with fp32 y: 24.67 / 24.48 against 24.93 / 24.95).
  if (has_tma_path(c, arch)) return staged_y({128, 256, 64, 2, 1, 4, 90, true});
  if (has_wgmma(arch)) return {128, 256, 64, 2, 1, 4, 90};  // warps_m/n count warpgroups
  return {128, 128, 64, 2, 4, 3};
}

GemmTile router_tile(const MoeConfig& c, long long max_tokens, bool wgmma) {
  if (max_tokens < kRouterMmaMinTokens) return {0, 0, 0, 0, 0, 0};
  const long long k_tiles = (c.d_hidden + 63) / 64;
  if (wgmma && max_tokens >= kRouterWgmmaMinTokens && c.n_routed_experts % 128 == 0) {
    // Two warpgroups of 64 rows, each all BLOCK_N columns (all of DeepSeek-V3's 256 experts: x
    // is read once, the router once a row block), 4 stages of 48 KB; K split into up to
    // k_tiles / 8 parts until kRouterWgmmaBlocks blocks run.
    const int block_n = c.n_routed_experts % 256 == 0 ? 256 : 128;
    const long long blocks = (max_tokens + 127) / 128 * (c.n_routed_experts / block_n);
    GemmTile t{128, block_n, 64, 2, 1, 4, 90};  // warps_m and warps_n count warpgroups
    t.split = int(std::clamp<long long>((kRouterWgmmaBlocks + blocks - 1) / blocks, 1,
                                        std::max<long long>(k_tiles / 8, 1)));
    return t;
  }
  // A skinny GEMM (N = E, K = H). A block walking all of K takes one long loop of loads, one stage
  // in flight per STAGES-th of it, and every row block reads the whole router from L2, so the
  // gating GEMM runs tall blocks with K split across kRouterMinBlocks blocks or more:
  //   - columns: E rounded up to 32, 64 or 128 (no block of 96 idle columns for E = 32);
  //   - rows: the tallest block, from 128 down to 16, that makes kRouterMinBlocks blocks with
  //     the K split;
  //   - split: up to 16 parts of at least 7 K tiles (DeepSeek-V3: 112 K tiles), as many as make
  //     kRouterMinBlocks blocks.
  // (Without a split, at 16 to 32 rows a block: DeepSeek-V3's gating GEMM took 50 us at T = 512
  // and 88 us at 4096 on the H200, by ncu.) Stages: up to 96 KB of loads in flight.
  const long long experts = c.n_routed_experts;
  const int block_n = experts <= 32 ? 32 : experts <= 64 ? 64 : 128;
  const long long col_blocks = (experts + block_n - 1) / block_n;
  const long long max_split = std::clamp<long long>(k_tiles / 7, 1, 16);
  auto blocks = [&](long long rows) { return (max_tokens + rows - 1) / rows * col_blocks; };
  int block_m = 128;
  while (block_m > 16 && blocks(block_m) * max_split < kRouterMinBlocks) block_m /= 2;
  const long long split = std::clamp<long long>(
      (kRouterMinBlocks + blocks(block_m) - 1) / blocks(block_m), 1, max_split);
  const int stage_bytes = (block_m + block_n) * 64 * 2;
  const int stages = std::clamp(96 * 1024 / stage_bytes, 3, 8);
  // Warps of 16 or more rows and 16 or more columns each (mma m16n8k16, ldmatrix.x4 of B).
  GemmTile t{block_m, block_n, 64, block_m == 16 ? 1 : 2, block_n == 128 ? 4 : 2, stages};
  t.split = int(split);
  return t;
}

KernelSpec router_spec(const MoeConfig& c, const GemmTile& tile) {
  if (tile.block_m != 0) return gemm_spec(c, GemmStage::kRouter, tile);
  return {"routing", "routing.cuh",
          fmt::format("rt_moe::RouterLogits<{}, {}, {}, {}, {}, {}, {}>", dtype_tag(c.dtype),
                      c.d_hidden, c.n_routed_experts, kRouterTokensPerBlock, kRouterWarps,
                      kRouterSplit, !c.routing.logits_fp32),
          "rt_moe::RouterParams"};
}

namespace {

// The template arguments of Topk (and RouteDecode) after the dtype: E, K, score, bias, groups,
// kept groups, group score, renormalize.
std::string topk_arguments(const MoeConfig& c) {
  const RoutingConfig& r = c.routing;
  // Without groups, topk_group and group_score mean nothing: one instance serves them all.
  const bool grouped = r.n_group > 1;
  const bool sum_top2 = grouped && r.group_score == RoutingConfig::GroupScore::kSumTop2;
  return fmt::format(
      "{}, {}, {}, {}, {}, {}, {}, {}, {}", dtype_tag(c.dtype), c.n_routed_experts, c.top_k,
      r.score == RoutingConfig::Score::kSigmoid ? "rt_moe::kScoreSigmoid" : "rt_moe::kScoreSoftmax",
      r.correction_bias, r.n_group, grouped ? r.topk_group : 1,
      sum_top2 ? "rt_moe::kGroupSumTop2" : "rt_moe::kGroupMax", r.renormalize);
}

}  // namespace

KernelSpec topk_spec(const MoeConfig& c) {
  return {"routing", "routing.cuh",
          fmt::format("rt_moe::Topk<{}, {}>", topk_arguments(c), kTopkWarps), "rt_moe::TopkParams"};
}

bool uses_route_decode(const GemmTile& tile, long long max_tokens) {
  return tile.fused && max_tokens <= kRouteDecodeMaxTokens;
}

KernelSpec route_decode_spec(const MoeConfig& c, int block_m) {
  return {"route_decode", "route_decode.cuh",
          fmt::format("rt_moe::RouteDecode<{}, {}, {}>", topk_arguments(c), c.n_shared_experts,
                      block_m),
          "rt_moe::RouteDecodeParams"};
}

KernelSpec offsets_spec(const MoeConfig& c, const GemmTile& tile) {
  return {"dispatch", "dispatch.cuh",
          fmt::format("rt_moe::Offsets<{}, {}, {}, {}, {}>", c.n_routed_experts, c.n_shared_experts,
                      c.top_k, tile.block_m, tile.swap),
          "rt_moe::OffsetsParams"};
}

KernelSpec scatter_spec(const MoeConfig& c, const GemmTile& tile) {
  return {"dispatch", "dispatch.cuh",
          fmt::format("rt_moe::Scatter<{}, {}, {}, {}, {}>", c.n_routed_experts, c.n_shared_experts,
                      c.top_k, kScatterThreads, tile.swap ? tile.block_m : 0),
          "rt_moe::ScatterParams"};
}

namespace {

// The template's GemmMode (tile_loader.cuh) of a stage.
const char* mode_tag(GemmStage stage) {
  switch (stage) {
    case GemmStage::kGateUp:
      return "rt_moe::kGateUp";
    case GemmStage::kDown:
      return "rt_moe::kDown";
    case GemmStage::kRouter:
      return "rt_moe::kRouter";
  }
  return "rt_moe::kGateUp";  // unreachable: every stage is named above
}

}  // namespace

KernelSpec gemm_spec(const MoeConfig& c, GemmStage stage, const GemmTile& t) {
  const std::string down_y = stage == GemmStage::kDown ? y_argument(c) : "";
  if (t.fused) {
    // One kernel for both stages: the plan launches it once (runtime.cpp).
    return {"grouped_gemm_decode", "grouped_gemm_decode.cuh",
            fmt::format(
                "rt_moe::GroupedGemmDecode<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}{}>",
                dtype_tag(c.dtype), c.d_hidden, c.d_expert, c.n_routed_experts, c.n_shared_experts,
                c.top_k, t.block_n, t.block_k, t.warps_n, t.stages, t.shared_down_last, t.split,
                t.shared_parts, y_argument(c)),
            "rt_moe::DecodeParams"};
  }
  if (t.gemv) {
    KernelSpec spec{"grouped_gemv", "grouped_gemv.cuh",
                    fmt::format("rt_moe::GroupedGemv<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}{}>",
                                dtype_tag(c.dtype), c.d_hidden, c.d_expert, c.n_routed_experts,
                                c.n_shared_experts, c.top_k, mode_tag(stage), t.block_m, t.warps_m,
                                t.stages, down_y),
                    "rt_moe::GemmParams"};
    // A register cap of 128 a thread: without one, ptxas interleaves the loads with the MMAs and
    // keeps ~3 loads in flight a lane; with it, all of a round's loads go first (SASS checked).
    spec.min_blocks = 512 / (32 * t.warps_m);
    return spec;
  }
  if (t.swap) {
    KernelSpec spec{
        "grouped_gemm_sm90_swap", "grouped_gemm_sm90_swap.cuh",
        fmt::format("rt_moe::GroupedGemmSm90Swap<{}, {}, {}, {}, {}, {}, {}, {}, {}{}>",
                    dtype_tag(c.dtype), c.d_hidden, c.d_expert, c.n_routed_experts,
                    c.n_shared_experts, c.top_k, mode_tag(stage), t.block_m, t.stages, down_y),
        "rt_moe::GemmTmaParams"};
    spec.min_blocks = 1;
    return spec;
  }
  if (t.sm == 90 && t.ws) {
    KernelSpec spec{
        "grouped_gemm_sm90_ws", "grouped_gemm_sm90_ws.cuh",
        fmt::format("rt_moe::GroupedGemmSm90Ws<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}{}>",
                    dtype_tag(c.dtype), c.d_hidden, c.d_expert, c.n_routed_experts,
                    c.n_shared_experts, c.top_k, mode_tag(stage), t.warps_m, t.block_n, t.stages,
                    t.cluster, stage == GemmStage::kDown && t.staged_y, down_y),
        "rt_moe::GemmTmaParams"};
    spec.min_blocks = 1;
    return spec;
  }
  if (t.sm == 90) {
    return {"grouped_gemm_sm90", "grouped_gemm_sm90.cuh",
            fmt::format("rt_moe::GroupedGemmSm90<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}{}>",
                        dtype_tag(c.dtype), c.d_hidden, c.d_expert, c.n_routed_experts,
                        c.n_shared_experts, c.top_k, mode_tag(stage), t.warps_m, t.warps_n,
                        t.block_n, t.stages, down_y),
            "rt_moe::GemmParams"};
  }
  return {
      "grouped_gemm_sm80", "grouped_gemm_sm80.cuh",
      fmt::format("rt_moe::GroupedGemmSm80<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}{}>",
                  dtype_tag(c.dtype), c.d_hidden, c.d_expert, c.n_routed_experts,
                  c.n_shared_experts, c.top_k, mode_tag(stage), t.block_m, t.block_n, t.block_k,
                  t.warps_m, t.warps_n, t.stages, down_y),
      "rt_moe::GemmParams"};
}

KernelSpec combine_spec(const MoeConfig& c) {
  return {"combine", "combine.cuh",
          fmt::format("rt_moe::Combine<{}, {}, {}{}>", dtype_tag(c.dtype), c.d_hidden,
                      c.top_k + c.n_shared_experts, y_argument(c)),
          "rt_moe::CombineParams"};
}

unsigned combine_blocks(std::int64_t tokens, std::int64_t d_hidden, YDType y_dtype) {
  return unsigned((tokens * (d_hidden / (16 / y_bytes(y_dtype))) + 255) / 256);
}

std::vector<KernelSpec> forward_specs(const MoeConfig& c, const GemmTile& tile,
                                      long long max_tokens) {
  const GemmTile router = router_tile(c, max_tokens, tile.sm == 90);
  if (uses_route_decode(tile, max_tokens)) {
    const KernelSpec route = route_decode_spec(c, tile.block_m);
    return {router_spec(c, router),
            route,
            route,
            route,
            gemm_spec(c, GemmStage::kGateUp, tile),
            gemm_spec(c, GemmStage::kDown, tile),
            combine_spec(c)};
  }
  return {router_spec(c, router),
          topk_spec(c),
          offsets_spec(c, tile),
          scatter_spec(c, tile),
          gemm_spec(c, GemmStage::kGateUp, tile),
          gemm_spec(c, GemmStage::kDown, tile),
          combine_spec(c)};
}

std::vector<KernelSpec> forward_specs(const MoeConfig& c, long long max_tokens,
                                      const std::string& arch) {
  return forward_specs(c, default_tile(c, max_tokens, arch), max_tokens);
}

}  // namespace rt_moe
