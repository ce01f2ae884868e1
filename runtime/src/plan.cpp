#include "plan.h"

#include <algorithm>

#include "params.h"

namespace rt_moe {
namespace {

std::size_t align_up(std::size_t v) { return (v + 255) / 256 * 256; }

}  // namespace

std::int64_t max_row_blocks(const MoeConfig& c, std::int64_t tokens, int block_m) {
  const std::int64_t pairs = tokens * (c.top_k + c.n_shared_experts);
  const std::int64_t experts = c.n_routed_experts + c.n_shared_experts;
  return (pairs + block_m - 1) / block_m + std::min(experts, pairs);
}

std::int64_t shared_gate_up_cols(const MoeConfig& c) { return gate_up_col_blocks(c, 32); }

WorkspaceLayout workspace_layout(const MoeConfig& c, std::int64_t max_tokens, int block_m,
                                 bool fused) {
  WorkspaceLayout l;
  const std::int64_t T = max_tokens, E = c.n_routed_experts, S = c.n_shared_experts;
  const std::int64_t k = c.top_k, slots = k + S;
  l.max_tokens = T;
  l.max_blocks = max_row_blocks(c, T, block_m);
  l.max_rows = l.max_blocks * block_m;
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    std::size_t offset = at;
    at = align_up(at + bytes);
    return offset;
  };
  // The gating GEMM's partial logits, one (T, E) array per part of its K split: as many as
  // either tensor-core router takes (the mma.sync one, or wgmma with an sm_90 GEMM tile).
  auto parts = [&](bool wgmma) {
    const GemmTile router = router_tile(c, T, wgmma);
    return std::int64_t(router.block_m == 0 ? 1 : router.split);
  };
  l.logits = take(sizeof(float) * T * E * std::max(parts(false), parts(true)));
  l.topk_ids = take(sizeof(int) * T * k);
  l.topk_weights = take(sizeof(float) * T * k);
  l.shared_chunk_blocks = fused ? (T + kFusedBlockM - 1) / kFusedBlockM : 0;
  CounterLayout& n = l.counters;
  const std::int64_t shared_blocks = S * l.shared_chunk_blocks;
  n.ints = std::size_t(E + 3 + l.max_blocks + shared_blocks * (1 + shared_gate_up_cols(c)) +
                       E * kCounterStride);
  n.counts = 0;
  n.tile_counters = n.counts + sizeof(int) * E;
  n.decode_ticket = n.tile_counters + sizeof(int) * 2;
  n.gate_up_done = n.decode_ticket + sizeof(int);
  n.shared_done = n.gate_up_done + sizeof(int) * l.max_blocks;
  n.shared_part_counts = n.shared_done + sizeof(int) * shared_blocks;
  n.count_lines = n.shared_part_counts + sizeof(int) * shared_blocks * shared_gate_up_cols(c);
  l.route_counts = take(sizeof(int) * E * (kCounterStride + 1));
  l.fill = take(sizeof(int) * E * kCounterStride);
  l.padded_offsets = take(sizeof(int) * (E + S + 1));
  l.block_expert = take(sizeof(int) * l.max_blocks);
  l.num_blocks = take(sizeof(int));
  l.sorted_rows = take(sizeof(int) * l.max_rows);
  l.h = take(std::size_t(dtype_bytes(c.dtype)) * l.max_rows * c.d_expert);
  l.shared_h = take(std::size_t(dtype_bytes(c.dtype)) * S * l.shared_chunk_blocks * kFusedBlockM *
                    c.d_expert);
  // A fused tile's gate/up column blocks times its B rows: at most 2 I + block_n (<= 128).
  l.shared_partials =
      take(sizeof(float) * shared_blocks * kMaxSharedParts * kFusedBlockM * (2 * c.d_expert + 128));
  l.y = take(std::size_t(y_bytes(c.y_dtype)) * T * slots * c.d_hidden);
  l.bytes = at;
  return l;
}

std::vector<int> shared_rows_table(const MoeConfig& c, std::int64_t chunk_blocks) {
  const std::int64_t S = c.n_shared_experts, slots = c.top_k + S, blocks = S * chunk_blocks;
  std::vector<int> table(1 + blocks + blocks * kFusedBlockM);
  table[0] = int(blocks);
  for (std::int64_t j = 0; j < S; ++j) {
    for (std::int64_t b = 0; b < chunk_blocks; ++b) {
      table[1 + j * chunk_blocks + b] = int(c.n_routed_experts + j);
    }
    for (std::int64_t r = 0; r < chunk_blocks * kFusedBlockM; ++r) {
      table[1 + blocks + j * chunk_blocks * kFusedBlockM + r] = int(r * slots + c.top_k + j);
    }
  }
  return table;
}

}  // namespace rt_moe
