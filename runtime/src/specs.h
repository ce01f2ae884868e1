// The kernel specs of one forward: which template instance each stage runs for a config and a
// tile choice. The only place that spells template arguments; a new variant is a new function
// here plus its template.
#pragma once

#include <string>
#include <vector>

#include "kernels.h"
#include "rt_moe/config.h"

namespace rt_moe {

// Tile of the grouped GEMM. sm = 80: mma.sync (grouped_gemm_sm80.cuh), warps_m x warps_n warps;
// sm = 90: wgmma (sm_90a only), warps_m x warps_n warpgroups (block_m = 64 warps_m): with ws
// false the cp.async ring of grouped_gemm_sm90.cuh, with ws true the warp-specialized TMA
// pipeline of grouped_gemm_sm90_ws.cuh (warps_m consumer warpgroups of 64 rows x block_n columns,
// warps_n = 1, plus one producer warpgroup; a persistent grid). gemv: the decode GEMV of
// grouped_gemv.cuh (any arch with mma.sync): block_m = 8 or 16 token rows, block_n = 16 weight rows
// a block (8 gate/up columns, 16 down columns), warps_m warps splitting K, stages rounds of loads
// in flight.
struct GemmTile {
  int block_m = 64;
  int block_n = 128;
  int block_k = 64;
  int warps_m = 2;
  int warps_n = 2;
  int stages = 4;
  int sm = 80;
  bool ws = false;
  int cluster = 1;  // ws: CTAs per cluster sharing (multicasting) weight tiles, 1 or 2
  bool gemv = false;
  // sm = 90, ws: the swapped-operand kernel of grouped_gemm_sm90_swap.cuh (block_m token rows as
  // wgmma's N, block_n = 256 weight rows as M, two consumer warpgroups).
  bool swap = false;
  // sm = 80, block_m = 16, warps_m = 1: gate/up and down in one kernel, work items from a ticket
  // counter (grouped_gemm_decode.cuh).
  bool fused = false;
  // fused: the shared expert's down tiles take their tickets after the routed gate/up tiles, not
  // before them ("sdl"), so fewer blocks hold a slot while they wait for its gate/up tiles.
  bool shared_down_last = false;
  // The tensor-core gating GEMM (router_tile): K split over this many blocks (gridDim.z), each
  // writing fp32 partial logits that the top-k kernel sums in split order. fused: 1, or 2 for
  // routed down tiles run as two K halves ("k2", grouped_gemm_decode.cuh).
  int split = 1;
  // fused: the shared expert's gate/up tiles each run as this many K parts ("sp2", "sp4";
  // grouped_gemm_decode.cuh SHARED_PARTS), so that more blocks stream weights while the routing
  // runs; 1 to kMaxSharedParts.
  int shared_parts = 1;
  // sm = 90, ws: the down GEMM writes y through shared memory and the copy engine ("sy"), its
  // ring as many of `stages` stages as fit beside the staging (grouped_gemm_sm90_ws.cuh,
  // STAGED_Y); the gate/up GEMM is the same as without.
  bool staged_y = false;
  // "sm80 64x128x64 w2x2 s4", "sm90ws 128x256x64 wg2 s4 c2", "sm90ws 128x256x64 wg2 s4 sy", "gemv
  // r8 w4 s1", "sm90swap 144x256x64 s4", "fused 16x64x64 w1x4 s8 sdl sp4"
  std::string describe() const;
  friend bool operator==(const GemmTile&, const GemmTile&) = default;
};

// Whether `arch` runs the wgmma path (sm_90a: the arch-specific target wgmma needs).
bool has_wgmma(const std::string& arch);
// Whether a config can run the TMA warp-specialized path on `arch`: sm_90a, and H and I multiples
// of 64 (a K tile never straddles two chunks of the shared expert's down matrix).
bool has_tma_path(const MoeConfig& config, const std::string& arch);

enum class GemmStage { kGateUp, kDown, kRouter };

// The heuristic default: the smallest BLOCK_M that the average rows per active expert fill,
// so decode does not multiply by padding rows and prefill gets large tiles. Always valid.
// On sm_90a, tiles of more than 64 rows use the wgmma path.
GemmTile default_tile(const MoeConfig& config, long long max_tokens, const std::string& arch);

// The gating GEMM runs on CUDA cores (one warp per expert, all experts in parallel) for few
// tokens, where it is a bandwidth-bound GEMV, and on tensor cores (the grouped GEMM's kRouter mode)
// from this many tokens on, where the CUDA-core version would reread x and the router from L2 tens
// of times.
inline constexpr long long kRouterMmaMinTokens = 32;
// The fused decode tile's row block (grouped_gemm_decode.cuh runs 16-row GroupedGemmSm80 tiles):
// also the block of the shared expert's rows in its plan-time table and h rows (plan.h).
inline constexpr int kFusedBlockM = 16;
// Gate/up column blocks of a tile of `block_n` B rows (block_n / 2 gate rows, then as many up
// rows): ceil(I / (block_n / 2)), the kernels' gate/up grid and the fused kernel's kGateUpCols.
long long gate_up_col_blocks(const MoeConfig& config, int block_n);
// Blocks the tensor-core gating GEMM aims for (about two an SM on a 132-SM H200).
inline constexpr long long kRouterMinBlocks = 256;
// The wgmma gating GEMM (grouped_gemm_sm90.cuh kRouter: 128-row blocks of one block an SM) runs
// from this many tokens, where a router of a multiple of 128 experts is compute-bound on mma.sync
// (DeepSeek-V3 at T = 16384: 182 us for 60 GFLOP, docs/PERF.md 8c), and aims for this many
// blocks (one wave on a 132-SM H200).
inline constexpr long long kRouterWgmmaMinTokens = 2048;
inline constexpr long long kRouterWgmmaBlocks = 128;
// The tile of the tensor-core gating GEMM for a bucket, or block_m == 0 for the CUDA-core kernel.
// `wgmma`: the bucket's grouped GEMM tile runs wgmma (GemmTile::sm == 90), so the GPU has it.
GemmTile router_tile(const MoeConfig& config, long long max_tokens, bool wgmma);

// Shared memory a tile needs, in bytes, with y of `y_dtype` (the staged y tiles' staging).
int tile_smem_bytes(const GemmTile& tile, YDType y_dtype);

// The tunable space for a bucket: every tile the GEMM templates accept on `arch` that fits in
// `max_smem` bytes of shared memory, without tiles much taller than the rows an expert can get
// (they only multiply padding), and without the fused K-half tile unless y is fp32. Always
// contains default_tile().
std::vector<GemmTile> candidate_tiles(const MoeConfig& config, long long max_tokens,
                                      const std::string& arch, int max_smem);

// The CUDA-core router (routing.cuh RouterLogits): blocks of kRouterWarps warps and
// kRouterTokensPerBlock tokens, either kRouterSplit warps a router row (few tokens: more, smaller
// blocks, DeepSeek-V3 fills 128 SMs at T = 1) or one warp a row; the launch picks by grid height.
inline constexpr int kRouterTokensPerBlock = 4;
inline constexpr int kRouterWarps = 8;
inline constexpr int kRouterSplit = 4;
inline constexpr int kTopkWarps = 4;
// Pairs a scatter block places (dispatch.cuh Scatter): one fill atomic per routed expert a block.
inline constexpr int kScatterThreads = 1024;

KernelSpec router_spec(const MoeConfig& config, const GemmTile& router_tile);
KernelSpec topk_spec(const MoeConfig& config);
// The dispatch of a tile's row blocks: packed, or even for the swapped tiles (dispatch.cuh).
KernelSpec offsets_spec(const MoeConfig& config, const GemmTile& tile);
KernelSpec scatter_spec(const MoeConfig& config, const GemmTile& tile);
// Top-k, offsets and scatter in one block (route_decode.cuh), for the fused decode tile.
KernelSpec route_decode_spec(const MoeConfig& config, int block_m);
// The decode routing kernel runs one token a warp on one SM, so it serves the fused tile's
// buckets of up to this many tokens. On the H200 (docs/PERF.md 11a) it saved 1 us at T = 1 and
// 2-3 us at T = 8 against top-k, offsets and scatter as three kernels, and lost 14 us at
// DeepSeek-V3 T = 64, where its one SM's issue rate bounds the 64 tokens' top-k.
inline constexpr long long kRouteDecodeMaxTokens = 8;
// Whether a bucket of up to `max_tokens` tokens with `tile` runs the decode routing kernel.
bool uses_route_decode(const GemmTile& tile, long long max_tokens);
KernelSpec gemm_spec(const MoeConfig& config, GemmStage stage, const GemmTile& tile);
KernelSpec combine_spec(const MoeConfig& config);
// The combine's grid: 256-thread blocks, one thread per 16 bytes of a y row: 4 outputs with fp32
// y, 8 with fp16 (combine.cuh).
unsigned combine_blocks(std::int64_t tokens, std::int64_t d_hidden, YDType y_dtype);

// Every spec a forward of a bucket of up to `max_tokens` tokens runs with the heuristic tiles.
std::vector<KernelSpec> forward_specs(const MoeConfig& config, long long max_tokens,
                                      const std::string& arch);

// Every spec a forward of one bucket (up to `max_tokens` tokens) runs with `tile`, in stage
// order: router, topk, offsets, scatter, gate_up, down, combine. Where uses_route_decode, topk,
// offsets and scatter are all the one decode routing kernel (route_decode_spec); with a fused
// tile, gate_up and down are the one fused GEMM.
std::vector<KernelSpec> forward_specs(const MoeConfig& config, const GemmTile& tile,
                                      long long max_tokens);

}  // namespace rt_moe
