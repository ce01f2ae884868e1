// A launch plan: for one bucket, the loaded kernels of every stage, the tile, and the workspace
// layout. Built once per bucket and reused by every forward of it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "bucket.h"
#include "kernels.h"
#include "specs.h"

namespace rt_moe {

// The forward's counters, byte offsets into a buffer of the plan's own (LaunchPlan::counters), not
// into the workspace that every bucket shares. They must be zero when a forward starts: the plan
// zeroes them when it is built, and every forward's combine zeroes them again once all the other
// stages are done with them. So a forward starts with no memset, and no other bucket's forward,
// which writes the workspace, can leave them dirty (CUDA graphs of several buckets replay in any
// order).
struct CounterLayout {
  std::size_t counts = 0;         // int (E): routed pairs per expert (Offsets, RouteDecode)
  std::size_t tile_counters = 0;  // int (2): the TMA grouped GEMMs' next tile (gate/up, down)
  // The fused decode GEMM's, and the swapped GEMMs' (GemmTmaParams), which no plan runs both of:
  std::size_t decode_ticket = 0;  // int (1): the decode GEMM's next work item; the swapped
                                  // gate/up's gate_up_started
  std::size_t gate_up_done = 0;   // int (max_blocks): finished gate/up tiles a row block (the
                                  // swapped gate/up: its consumer warps' counts, row_done)
  std::size_t shared_done = 0;    // int (S * shared_chunk_blocks): the same, shared rows
  // int (S * shared_chunk_blocks * shared_gate_up_cols): the K parts of each shared gate/up tile
  // that finished (DecodeParams::shared_part_counts)
  std::size_t shared_part_counts = 0;
  std::size_t count_lines = 0;  // int (E * kCounterStride): top-k's atomic counts (params.h)
  std::size_t ints = 0;         // all of them
};

// Byte offsets of the forward's scratch arrays in the workspace, sized for a bucket.
struct WorkspaceLayout {
  std::int64_t max_tokens = 0;
  std::int64_t max_blocks = 0;     // row blocks of BLOCK_M, worst case
  std::int64_t max_rows = 0;       // max_blocks * BLOCK_M
  std::size_t logits = 0;          // float (T, E)
  std::size_t topk_ids = 0;        // int (T, k)
  std::size_t topk_weights = 0;    // float (T, k)
  CounterLayout counters;          // in LaunchPlan::counters, not in the workspace
  std::size_t route_counts = 0;    // int (E * kCounterStride + E): route()'s count lines, zeroed
                                   // before it, then its counts
  std::size_t fill = 0;            // int (E * kCounterStride): the scatter's fill counters
  std::size_t padded_offsets = 0;  // int (E + S + 1)
  std::size_t block_expert = 0;    // int (max_blocks)
  std::size_t num_blocks = 0;      // int (1)
  std::size_t sorted_rows = 0;     // int (max_rows)
  std::size_t h = 0;               // dtype (max_rows, I)
  // The fused decode GEMM only (else 0): the shared expert's own h rows, 16-row blocks for the
  // bucket's most tokens, shared_chunk_blocks of them a chunk.
  std::int64_t shared_chunk_blocks = 0;
  std::size_t shared_h = 0;  // dtype (S * shared_chunk_blocks * 16, I)
  // float: the shared gate/up tiles' K parts' partial sums (DecodeParams::shared_partials), for
  // up to kMaxSharedParts parts and any fused tile's columns
  std::size_t shared_partials = 0;
  std::size_t y = 0;      // (T * (k + S), H) of MoeConfig::y_dtype
  std::size_t bytes = 0;  // total
};

// The fused decode GEMM's shared gate/up column blocks, counted for its narrowest tile (32 B rows,
// 16 h columns a block), so that every fused tile fits the counters sized by it.
std::int64_t shared_gate_up_cols(const MoeConfig& config);

// Row blocks needed in the worst case for `tokens`: every pair, plus one partial block for each
// expert that can be non-empty.
std::int64_t max_row_blocks(const MoeConfig& config, std::int64_t tokens, int block_m);

// `fused`: with the fused decode GEMM's shared rows and counters (GemmTile::fused).
WorkspaceLayout workspace_layout(const MoeConfig& config, std::int64_t max_tokens, int block_m,
                                 bool fused = false);

// The fused decode GEMM's table of the shared expert's rows (LaunchPlan::shared_table): the row
// block count S * chunk_blocks, the expert (E + j) of each row block, then the pair of each row:
// chunk j's row r is token r's pair r (k + S) + k + j (rows of tokens past a forward's count are
// skipped by the kernels).
std::vector<int> shared_rows_table(const MoeConfig& config, std::int64_t chunk_blocks);

struct LaunchPlan {
  Bucket bucket;
  GemmTile tile;
  GemmTile router_tile;  // block_m == 0: the CUDA-core router kernel
  // topk, offsets and scatter are the one decode routing kernel (uses_route_decode)
  bool route_decode = false;
  WorkspaceLayout layout;
  const Kernel* router = nullptr;
  const Kernel* topk = nullptr;
  const Kernel* offsets = nullptr;
  const Kernel* scatter = nullptr;
  const Kernel* gate_up = nullptr;
  const Kernel* down = nullptr;
  const Kernel* combine = nullptr;
  unsigned gemm_ctas = 0;   // persistent grid of the TMA grouped GEMMs (tile.ws): blocks that fit
  int tile_band = 0;        // their tile order: row blocks per band (GemmTmaParams::band)
  int shared_prefetch = 0;  // GemmParams::shared_prefetch of the gate/up launch
  // The fused decode GEMM's table of the shared expert's rows (DecodeParams): the row block
  // count, the expert of each row block, then the pair of each row.
  driver::DeviceBuffer shared_table;
  // The forward's counters (layout.counters), zero between forwards; counters_dirty when a forward
  // threw after it launched some stages, so the next one zeroes them first (MoeRuntime::Impl::
  // enqueue).
  driver::DeviceBuffer counters;
  mutable bool counters_dirty = false;
};

}  // namespace rt_moe
