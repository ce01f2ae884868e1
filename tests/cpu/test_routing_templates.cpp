// The routing kernels compile for sm_90a with NVRTC for every preset's routing and the routing
// variants of REFERENCE.md section 4, and their instances spell every knob. No GPU needed.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels.h"
#include "nvrtc_sm90a.h"
#include "params.h"
#include "plan.h"
#include "reference.h"
#include "rt_moe/presets.h"
#include "specs.h"

namespace rt_moe {
namespace {

// DeepSeek-V2's routing (softmax, 8 groups keep 3 by max, x16) on a small shape, in fp16.
MoeConfig deepseek_v2_style() {
  MoeConfig c = test::make_config(1032, 200, 64, 1, 6, DType::kF16);
  c.routing = test::deepseek_v2_routing();
  return c;
}

}  // namespace

TEST_CASE("routing: Topk and the router kernels compile for sm_90a for every preset's routing",
          "[nvrtc]") {
  std::vector<std::pair<std::string, MoeConfig>> configs;
  for (const std::string& name : preset_names()) configs.emplace_back(name, preset(name).moe);
  configs.emplace_back("deepseek-v2-style fp16", deepseek_v2_style());
  for (const auto& [name, c] : configs) {
    INFO(name << ": " << c.routing.describe());
    // The CUDA-core router (decode), the mma.sync and wgmma routers (prefill), and top-k.
    for (const KernelSpec& spec :
         {router_spec(c, router_tile(c, 1, false)), router_spec(c, router_tile(c, 4096, false)),
          router_spec(c, router_tile(c, 16384, true)), topk_spec(c)}) {
      INFO(spec.name());
      CHECK(is_elf(compile_for_sm90a(spec)));
    }
  }
}

TEST_CASE("routing: the tensor-core router's tile covers the experts, fills the GPU and compiles",
          "[nvrtc]") {
  for (const std::string& name : preset_names()) {
    const MoeConfig c = preset(name).moe;
    const long long E = c.n_routed_experts;
    std::set<std::string> compiled;
    for (long long T :
         {1LL, 31LL, 32LL, 64LL, 127LL, 128LL, 512LL, 1024LL, 2048LL, 4096LL, 8192LL, 16384LL}) {
      const GemmTile t = router_tile(c, T, false);
      INFO(name << ", T = " << T << ": " << t.describe());
      if (T < kRouterMmaMinTokens) {
        CHECK(t.block_m == 0);  // the CUDA-core router
        CHECK(router_tile(c, T, true).block_m == 0);
        continue;
      }
      CHECK(t.sm == 80);
      // Columns: E rounded up to 32, 64 or 128 (wider routers take several column blocks).
      const int want_n = E <= 32 ? 32 : E <= 64 ? 64 : 128;
      CHECK(t.block_n == want_n);
      // K split in up to 16 parts of 7 or more K tiles each.
      const long long k_tiles = (c.d_hidden + 63) / 64;
      const long long max_split = std::clamp<long long>(k_tiles / 7, 1, 16);
      CHECK(t.split >= 1);
      CHECK(t.split <= max_split);
      CHECK((t.split == 1 || k_tiles / t.split >= 7));
      // Rows: the tallest of 128, 64, 32, 16 that makes kRouterMinBlocks blocks with the largest
      // split, else 16; the split: the fewest parts that make kRouterMinBlocks blocks.
      const long long cols = (E + t.block_n - 1) / t.block_n;
      auto blocks = [&](long long rows) { return (T + rows - 1) / rows * cols; };
      CHECK((t.block_m == 16 || blocks(t.block_m) * max_split >= kRouterMinBlocks));
      CHECK((t.block_m == 128 || blocks(2 * t.block_m) * max_split < kRouterMinBlocks));
      CHECK((t.split == max_split || blocks(t.block_m) * t.split >= kRouterMinBlocks));
      CHECK((t.split == 1 || blocks(t.block_m) * (t.split - 1) < kRouterMinBlocks));
      // Warps of whole m16 fragments and ldmatrix.x4 column pairs; 3 to 8 stages of <= 96 KB.
      CHECK(t.block_m % (16 * t.warps_m) == 0);
      CHECK(t.block_n % (16 * t.warps_n) == 0);
      CHECK(t.stages >= 3);
      CHECK(t.stages <= 8);
      CHECK((t.stages == 3 || t.stages * (t.block_m + t.block_n) * 64 * 2 <= 96 * 1024));
      const KernelSpec spec = router_spec(c, t);
      if (compiled.insert(spec.name()).second) CHECK(is_elf(compile_for_sm90a(spec)));
    }
  }
}

TEST_CASE("routing: the wgmma router's tile covers the experts, fills the GPU and compiles",
          "[nvrtc]") {
  for (const std::string& name : preset_names()) {
    const MoeConfig c = preset(name).moe;
    const long long E = c.n_routed_experts;
    const long long k_tiles = (c.d_hidden + 63) / 64;
    std::set<std::string> compiled;
    for (long long T : {32LL, 1024LL, 2047LL, 2048LL, 4096LL, 8192LL, 16384LL, 65536LL}) {
      const GemmTile t = router_tile(c, T, true);
      INFO(name << ", T = " << T << ": " << t.describe());
      if (T < kRouterWgmmaMinTokens || E % 128 != 0) {
        // The mma.sync router, the same tile as on a GPU without wgmma.
        CHECK(t.describe() == router_tile(c, T, false).describe());
        CHECK(t.split == router_tile(c, T, false).split);
        continue;
      }
      // Two warpgroups of 64 rows; all of E = 256 (else 128 columns a block); 4 stages.
      CHECK(t.sm == 90);
      CHECK(t.block_m == 128);
      CHECK(t.warps_m == 2);
      CHECK(t.warps_n == 1);
      CHECK(t.block_n == (E % 256 == 0 ? 256 : 128));
      CHECK(E % t.block_n == 0);
      CHECK(t.stages == 4);
      CHECK(tile_smem_bytes(t, c.y_dtype) <= 227 * 1024);
      // The split shows in the name the bench and describe() print.
      CHECK(t.describe().ends_with(t.split > 1 ? fmt::format(" s4 k{}", t.split) : " s4"));
      // K split: the fewest parts (of at least 8 K tiles) that make kRouterWgmmaBlocks blocks.
      const long long blocks = (T + 127) / 128 * (E / t.block_n);
      const long long max_split = std::max<long long>(k_tiles / 8, 1);
      CHECK(t.split >= 1);
      CHECK(t.split <= max_split);
      CHECK((t.split == max_split || blocks * t.split >= kRouterWgmmaBlocks));
      CHECK((t.split == 1 || blocks * (t.split - 1) < kRouterWgmmaBlocks));
      const KernelSpec spec = router_spec(c, t);
      CHECK(spec.name().starts_with("rt_moe::GroupedGemmSm90<"));
      CHECK(spec.name().find("rt_moe::kRouter") != std::string::npos);
      if (compiled.insert(spec.name()).second) CHECK(is_elf(compile_for_sm90a(spec)));
    }
  }
}

TEST_CASE("routing: the workspace holds every part of the gating GEMM's K split", "[routing]") {
  for (const std::string& name : preset_names()) {
    const ModelConfig model = preset(name);
    const MoeConfig& c = model.moe;
    for (long long T : {1LL, 32LL, 64LL, 512LL, 4096LL, 16384LL}) {
      if (T > model.max_tokens) continue;
      long long parts = 1;
      for (bool wgmma : {false, true}) {
        const GemmTile t = router_tile(c, T, wgmma);
        parts = std::max<long long>(parts, t.block_m == 0 ? 1 : t.split);
      }
      INFO(name << ", T = " << T << ": " << parts << " parts");
      const WorkspaceLayout l = workspace_layout(c, T, 16);
      // The logits come first; the top-k ids follow them.
      CHECK(l.topk_ids - l.logits >= sizeof(float) * std::size_t(T * c.n_routed_experts * parts));
    }
  }
}

TEST_CASE("the counters: one array of the plan's own, each counter in it once", "[routing]") {
  for (const std::string& name : preset_names()) {
    const MoeConfig& c = preset(name).moe;
    for (long long T : {1LL, 64LL, 4096LL}) {
      for (bool fused : {false, true}) {
        INFO(name << ", T = " << T << (fused ? ", fused" : ""));
        const WorkspaceLayout l = workspace_layout(c, T, 16, fused);
        const CounterLayout& n = l.counters;
        const std::size_t E = std::size_t(c.n_routed_experts), S = std::size_t(c.n_shared_experts);
        // In order, back to back, ending where `ints` says: the combine zeroes exactly them.
        CHECK(n.counts == 0);
        CHECK(n.tile_counters == sizeof(int) * E);
        CHECK(n.decode_ticket == n.tile_counters + sizeof(int) * 2);
        CHECK(n.gate_up_done == n.decode_ticket + sizeof(int));
        CHECK(n.shared_done == n.gate_up_done + sizeof(int) * std::size_t(l.max_blocks));
        const std::size_t shared_blocks = S * std::size_t(l.shared_chunk_blocks);
        CHECK(n.shared_part_counts == n.shared_done + sizeof(int) * shared_blocks);
        // A count for each shared gate/up tile of any fused tile (>= 16 h columns a tile).
        CHECK(std::int64_t(shared_gate_up_cols(c)) * 16 >= c.d_expert);
        CHECK(n.count_lines == n.shared_part_counts + sizeof(int) * shared_blocks *
                                                          std::size_t(shared_gate_up_cols(c)));
        // The parts' partial sums: kMaxSharedParts parts of 16 x (2 I + 128) floats a shared
        // row block, and none without the fused tile.
        CHECK(l.y - l.shared_partials >= sizeof(float) * shared_blocks * kMaxSharedParts * 16 *
                                             std::size_t(2 * c.d_expert + 128));
        if (!fused) CHECK(l.y == l.shared_partials);
        CHECK(n.ints * sizeof(int) == n.count_lines + sizeof(int) * E * kCounterStride);
        // route()'s count lines and counts are the workspace's, apart from the logits and top-k
        // arrays around them; the scatter's fill counters one a line as well.
        CHECK(l.route_counts >= l.topk_weights + sizeof(float) * std::size_t(T * c.top_k));
        CHECK(l.fill >= l.route_counts + sizeof(int) * E * (kCounterStride + 1));
        CHECK(l.padded_offsets >= l.fill + sizeof(int) * E * kCounterStride);
      }
    }
  }
}

TEST_CASE("the fused decode GEMM's table of the shared rows: every chunk's tokens in order",
          "[routing]") {
  MoeConfig c = preset("deepseek-v3").moe;
  c.n_shared_experts = 2;
  const long long slots = c.top_k + 2, chunk_blocks = 3;  // up to 48 tokens a chunk
  const std::vector<int> table = shared_rows_table(c, chunk_blocks);
  REQUIRE(table.size() == std::size_t(1 + 2 * chunk_blocks * 17));
  CHECK(table[0] == 2 * chunk_blocks);
  for (long long j = 0; j < 2; ++j) {
    for (long long b = 0; b < chunk_blocks; ++b) {
      CHECK(table[1 + j * chunk_blocks + b] == c.n_routed_experts + j);
    }
    for (long long r = 0; r < chunk_blocks * 16; ++r) {
      // Row block m = j * chunk_blocks + b holds rows [16 m, 16 m + 16): token 16 b + r % 16.
      const int pair = table[1 + 2 * chunk_blocks + j * chunk_blocks * 16 + r];
      CHECK(pair / slots == r);
      CHECK(pair % slots == c.top_k + j);
    }
  }
  const WorkspaceLayout fused = workspace_layout(c, 48, 16, true);
  CHECK(fused.shared_chunk_blocks == chunk_blocks);
  CHECK(workspace_layout(c, 48, 16).shared_chunk_blocks == 0);
}

TEST_CASE("routing: the Topk instance spells every knob, and equivalent configs share one",
          "[nvrtc]") {
  const MoeConfig v3 = preset("deepseek-v3").moe;
  CHECK(topk_spec(v3).name() ==
        "rt_moe::Topk<rt_moe::BF16, 256, 8, rt_moe::kScoreSigmoid, true, 8, 4, "
        "rt_moe::kGroupSumTop2, true, 4>");
  const MoeConfig qwen = preset("qwen3-30b-a3b").moe;
  CHECK(topk_spec(qwen).name() ==
        "rt_moe::Topk<rt_moe::BF16, 128, 8, rt_moe::kScoreSoftmax, false, 1, 1, "
        "rt_moe::kGroupMax, true, 4>");
  // fp32 logits: the CUDA-core router's ROUND_LOGITS is false (the tensor-core one takes
  // GemmParams::round_logits at run time).
  CHECK(router_spec(qwen, router_tile(qwen, 1, false)).name().ends_with(", false>"));
  CHECK(router_spec(v3, router_tile(v3, 1, false)).name().ends_with(", true>"));

  // Each knob changes the instance...
  std::set<std::string> names;
  auto add = [&](auto change) {
    MoeConfig c = v3;
    change(c.routing);
    c.validate();
    names.insert(topk_spec(c).source());
  };
  add([](RoutingConfig&) {});
  add([](RoutingConfig& r) { r.score = RoutingConfig::Score::kSoftmax; });
  add([](RoutingConfig& r) { r.correction_bias = false; });
  add([](RoutingConfig& r) { r.n_group = 4; });
  add([](RoutingConfig& r) { r.topk_group = 2; });
  add([](RoutingConfig& r) { r.group_score = RoutingConfig::GroupScore::kMax; });
  add([](RoutingConfig& r) { r.renormalize = false; });
  CHECK(names.size() == 7);
  // ...but a run-time scale does not, nor do group knobs that mean nothing without groups.
  MoeConfig a = qwen, b = qwen;
  b.routing.routed_scaling_factor = 2.5f;
  b.routing.group_score = RoutingConfig::GroupScore::kSumTop2;
  CHECK(topk_spec(a).source() == topk_spec(b).source());
}

}  // namespace rt_moe
