// Kernel parameter structs, shared by host code and the kernel templates so that launch arguments
// can never drift from the signatures. Each kernel takes one `const __grid_constant__` struct.
// Only built-in types: NVRTC compiles this with no system header.
#pragma once

namespace rt_moe {

// One expert's weights. Routed experts come first (E of them), then the S chunks of the shared
// expert (each I wide, weight 1): the shared expert of width S*I is computed as S experts.
struct ExpertWeights {
  const void* gate;   // (I, H) rows of K = H contiguous
  const void* up;     // (I, H)
  const void* down;   // (H, I) this expert's columns, row stride down_ld
  long long down_ld;  // I for routed experts, S*I for shared chunks
};

struct RouterParams {
  const void* x;       // (T, H)
  const void* router;  // (E, H)
  float* logits;       // (T, E) fp32, dtype-rounded unless the template's ROUND_LOGITS is false
  int tokens;
};

// Global counters that many blocks add to, one a 128-byte line, kCounterStride ints apart: atomic
// adds on counters packed 32 a line serialize in the L2 line by line (DeepSeek-V3 at T = 16384 on
// the H200: the scatter's 131 K adds onto 256 packed counters took 37.7 us, 18.3 one a line).
inline constexpr int kCounterStride = 32;

// The dynamic shared memory an sm_90 block may opt in to (227 KB): what the ring and staging of
// grouped_gemm_sm90_ws.cuh are sized against, on the device and in the host's tile filter.
inline constexpr int kMaxDynamicSmemSm90 = 227 * 1024;

// The fused decode GEMM's shared expert gate/up tiles run as up to this many K parts
// (grouped_gemm_decode.cuh, SHARED_PARTS): the workspace's partial sums are sized for it.
inline constexpr int kMaxSharedParts = 4;

struct TopkParams {
  const float* logits;  // (logit_splits, T, E)
  const float* bias;    // (E) correction bias, added to the scores for selection only; null
                        // unless the template's BIAS
  int* topk_ids;        // (T, k)
  float* topk_weights;  // (T, k) dtype-rounded
  int* count_lines;     // (E * kCounterStride) the Topk kernel adds one a choice at
                        // [expert * kCounterStride]; zero when the routing starts
  int tokens;
  float routed_scaling_factor;
  // Parts of the gating GEMM's K split: > 1, the logits are fp32 partial sums, added here in
  // part order and then rounded to the dtype when round_logits; 1, the logits as the router
  // wrote them (rounded there).
  int logit_splits;
  int round_logits;
};

struct OffsetsParams {
  const int* count_lines;  // (E * kCounterStride) top-k's counts (the Offsets kernel)
  int* expert_counts;      // (E) routed pairs per expert, stored here for the GEMMs
  int* expert_fill;        // (E * kCounterStride) zeroed here, added to by the scatter kernel
  int* padded_offsets;     // (E + S + 1) start row of each expert, padded to BLOCK_M
  int* block_expert;       // (max_blocks) expert of each row block
  int* num_blocks;         // (1) row blocks in use
  int* sorted_rows;        // (max_rows) padding rows are set to -1 here
  int tokens;
  int max_blocks;
};

struct ScatterParams {
  const int* topk_ids;        // (T, k)
  const int* padded_offsets;  // (E + S + 1)
  int* expert_fill;           // (E * kCounterStride) rows taken of each routed expert
  int* sorted_rows;           // (max_rows) pair index t * (k + S) + slot, grouped by expert
  const int* expert_counts;   // (E) routed pairs per expert (read with even row blocks)
  int tokens;
};

// The decode routing (route_decode.cuh): top-k, offsets and scatter in one block. It counts in
// shared memory (no count_lines, no expert_fill) and stores the counts to offsets.expert_counts
// for the GEMMs.
struct RouteDecodeParams {
  TopkParams topk;
  OffsetsParams offsets;
};

struct GemmParams {
  const void* a;                 // gate/up, router: x (T, H); down: h (max_rows, I)
  void* out;                     // gate/up: h (max_rows, I); down: y (T * (k + S), H), fp32 or
                                 // scaled fp16 (YOps in common.cuh);
                                 // router: fp32 logits (T, E), one array a K part (gridDim.z)
  const void* b;                 // router only: (E, H)
  const ExpertWeights* experts;  // (E + S)
  const int* sorted_rows;        // (max_rows)
  const int* block_expert;       // (max_blocks)
  const int* num_blocks;         // (1)
  const int* padded_offsets;     // (E + S + 1): expert e's rows start at padded_offsets[e]
  const float* topk_weights;     // (T, k), down only
  const int* expert_counts;      // (E) routed pairs per expert (the shared chunks have T rows)
  int tokens;
  int round_logits;  // router only: 1 rounds the logits to the dtype, 0 keeps fp32
  // gate/up of the mma.sync path only: bytes of the start (in K) of every shared expert gate and
  // up row that the blocks prefetch into L2 before they wait for the routing (0: none). The host
  // sets it only when the whole grid is resident at once, so the prefetch overlaps the routing.
  int shared_prefetch;
};

// The fused decode GEMM (grouped_gemm_decode.cuh): both GEMMs' parameters, the ticket counter
// and the per row block counts of finished gate/up tiles, all zero at launch.
struct DecodeParams {
  GemmParams gate_up;
  GemmParams down;
  // The shared expert's chunks, which do not depend on the routing: the same GEMMs over a table
  // of their rows (sorted_rows: chunk j's row r is pair r (k + S) + k + j, written at plan time
  // for the bucket's most tokens; block_expert; num_blocks) and their own h rows.
  GemmParams shared_gate_up;
  GemmParams shared_down;
  int shared_chunk_blocks;  // row blocks a chunk takes in the table (the bucket's most tokens)
  int* ticket;              // (1)
  int* gate_up_done;        // (max_blocks) finished gate/up tiles of each routed row block
  int* shared_done;         // (S * shared_chunk_blocks) the same for the shared rows
  // SHARED_PARTS > 1: the K parts' fp32 partial sums of each shared gate/up tile (row block m,
  // column block n): SHARED_PARTS x 16 BLOCK_N floats at (m kGateUpCols + n) SHARED_PARTS 16
  // BLOCK_N, and the parts of each tile that finished, at m kGateUpCols + n.
  float* shared_partials;
  int* shared_part_counts;
};

// A CUDA tensor map (CUtensorMap: 128 opaque bytes, 128-byte aligned as in cuda.h), encoded on the
// host by cuTensorMapEncodeTiled and read by the tensor-copy engine from the kernel's parameters.
struct alignas(128) TensorMap {
  unsigned long long opaque[16];
};

// The warp-specialized sm_90a grouped GEMM (grouped_gemm_sm90_ws.cuh): the GemmParams plus the
// tensor maps of its TMA loads. Every map has 64-element (128-byte) boxes along K, 128-byte
// swizzled.
struct GemmTmaParams {
  TensorMap b_routed[2];  // gate/up: gate, up [E I, H]; down: down [E H, I] ([1] unused)
  TensorMap b_shared[2];  // gate/up: shared_gate, shared_up [S I, H]; down: shared_down [H, S I]
  TensorMap a;            // down: h [max_rows, I]; unused by gate/up (gathered by cp.async)
  GemmParams gemm;
  int* tile_counter;  // (1) zero at launch: the next tile to hand out (without clusters)
  int band;           // row blocks per band of the tile order (>= 1; see tile_of), no clusters
  // The swapped kernels (grouped_gemm_sm90_swap.cuh) only, else null: the down GEMM starts on the
  // SMs that gate/up's last tiles leave idle, each tile once gate/up has written its h rows,
  // instead of after the whole gate/up grid. Both zero at launch:
  int* row_done;         // (max_blocks) gate/up: per row block, one count a consumer warp and
                         // tile stored; down: waits for all of them before it reads the h rows
  int* gate_up_started;  // (1) gate/up: set once it waited for the routing; down: waits for it
                         // before it reads the routing's outputs
};

struct CombineParams {
  const void* y;  // (T, k + S, H), fp32 or scaled fp16 (the template's Y)
  void* out;      // (T, H)
  int tokens;
  // The forward's counters, zeroed here for the next forward of the plan once every stage before
  // is done with them (CounterLayout in runtime/src/plan.h).
  int* counters;
  int counter_ints;
};

// Written by every generated instantiation as `rt_moe_meta`, read by the host at load time, so the
// block size and shared memory a kernel needs come from the kernel itself.
struct KernelMeta {
  int threads;
  int smem_bytes;
};

// HBM read bandwidth of rt_moe_bench (bench.cuh): every 16-byte vector of `data` is read once.
struct ReadParams {
  const void* data;  // (vectors) 16-byte vectors
  long long vectors;
  unsigned* block_sums;  // (gridDim.x) one value per block, so no load is optimized away
};

// The read buffer's random contents (bench.cuh's FillBits): word i = hash(i, seed) & mask.
struct FillParams {
  unsigned* data;  // (words)
  long long words;
  unsigned seed;
  unsigned mask;
};

}  // namespace rt_moe
