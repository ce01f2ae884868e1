#include "specs.h"

#include <fmt/format.h>

#include <algorithm>

namespace rt_moe {
namespace {

const char* dtype_tag(DType dtype) { return dtype == DType::kF16 ? "rt_moe::F16" : "rt_moe::BF16"; }

}  // namespace

std::string GemmTile::describe() const {
  if (sm == 90) {
    return fmt::format("sm90 {}x{}x{} wg{}x{} s{}", block_m, block_n, block_k, warps_m, warps_n,
                       stages);
  }
  return fmt::format("sm80 {}x{}x{} w{}x{} s{}", block_m, block_n, block_k, warps_m, warps_n,
                     stages);
}

bool has_wgmma(const std::string& arch) { return arch == "sm_90a"; }

GemmTile default_tile(const MoeConfig& c, long long max_tokens, const std::string& arch) {
  const long long slots = c.top_k + c.n_shared_experts;
  const long long experts = c.n_routed_experts + c.n_shared_experts;
  const long long pairs = max_tokens * slots;
  const long long active = std::max(1LL, std::min(experts, pairs));
  const long long rows_per_expert = (pairs + active - 1) / active;
  if (rows_per_expert <= 16) return {16, 128, 64, 1, 4, 4};
  if (rows_per_expert <= 32) return {32, 128, 64, 2, 2, 4};
  if (rows_per_expert <= 64) return {64, 128, 64, 2, 2, 4};
  if (has_wgmma(arch)) return {128, 256, 64, 2, 1, 4, 90};  // warps_m/n count warpgroups
  return {128, 128, 64, 2, 4, 3};
}

GemmTile router_tile(const MoeConfig& c, long long max_tokens) {
  (void)c;
  if (max_tokens < kRouterMmaMinTokens) return {0, 0, 0, 0, 0, 0};
  if (max_tokens <= 1024) return {64, 128, 64, 2, 2, 4};
  return {128, 128, 64, 2, 4, 3};
}

KernelSpec router_spec(const MoeConfig& c, const GemmTile& tile) {
  if (tile.block_m != 0) return gemm_spec(c, GemmStage::kRouter, tile);
  return {"routing", "routing.cuh",
          fmt::format("rt_moe::RouterLogits<{}, {}, {}, {}, {}>", dtype_tag(c.dtype), c.d_hidden,
                      c.n_routed_experts, kRouterTokensPerBlock, kRouterWarps),
          "rt_moe::RouterParams"};
}

KernelSpec topk_spec(const MoeConfig& c) {
  return {"routing", "routing.cuh",
          fmt::format("rt_moe::Topk<{}, {}, {}, {}, {}>", dtype_tag(c.dtype), c.n_routed_experts,
                      c.top_k, c.routing.renormalize ? "true" : "false", kTopkWarps),
          "rt_moe::TopkParams"};
}

KernelSpec offsets_spec(const MoeConfig& c, int block_m) {
  return {"dispatch", "dispatch.cuh",
          fmt::format("rt_moe::Offsets<{}, {}, {}, {}>", c.n_routed_experts, c.n_shared_experts,
                      c.top_k, block_m),
          "rt_moe::OffsetsParams"};
}

KernelSpec scatter_spec(const MoeConfig& c) {
  return {"dispatch", "dispatch.cuh",
          fmt::format("rt_moe::Scatter<{}, {}, {}>", c.n_routed_experts, c.n_shared_experts,
                      c.top_k),
          "rt_moe::ScatterParams"};
}

KernelSpec gemm_spec(const MoeConfig& c, GemmStage stage, const GemmTile& t) {
  if (t.sm == 90) {
    return {"grouped_gemm_sm90", "grouped_gemm_sm90.cuh",
            fmt::format("rt_moe::GroupedGemmSm90<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}>",
                        dtype_tag(c.dtype), c.d_hidden, c.d_expert, c.n_routed_experts,
                        c.n_shared_experts, c.top_k,
                        stage == GemmStage::kGateUp ? "rt_moe::kGateUp" : "rt_moe::kDown",
                        t.warps_m, t.warps_n, t.block_n, t.stages),
            "rt_moe::GemmParams"};
  }
  return {"grouped_gemm_sm80", "grouped_gemm_sm80.cuh",
          fmt::format("rt_moe::GroupedGemmSm80<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}>",
                      dtype_tag(c.dtype), c.d_hidden, c.d_expert, c.n_routed_experts,
                      c.n_shared_experts, c.top_k,
                      stage == GemmStage::kGateUp ? "rt_moe::kGateUp"
                      : stage == GemmStage::kDown ? "rt_moe::kDown"
                                                  : "rt_moe::kRouter",
                      t.block_m,
                      t.block_n, t.block_k, t.warps_m, t.warps_n, t.stages),
          "rt_moe::GemmParams"};
}

KernelSpec combine_spec(const MoeConfig& c) {
  return {"combine", "combine.cuh",
          fmt::format("rt_moe::Combine<{}, {}, {}>", dtype_tag(c.dtype), c.d_hidden,
                      c.top_k + c.n_shared_experts),
          "rt_moe::CombineParams"};
}

std::vector<KernelSpec> forward_specs(const MoeConfig& c, const GemmTile& tile,
                                      const GemmTile& router) {
  return {router_spec(c, router),
          topk_spec(c),
          offsets_spec(c, tile.block_m),
          scatter_spec(c),
          gemm_spec(c, GemmStage::kGateUp, tile),
          gemm_spec(c, GemmStage::kDown, tile),
          combine_spec(c)};
}

std::vector<KernelSpec> forward_specs(const MoeConfig& c, long long max_tokens,
                                      const std::string& arch) {
  return forward_specs(c, default_tile(c, max_tokens, arch), router_tile(c, max_tokens));
}

}  // namespace rt_moe
