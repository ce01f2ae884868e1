// The cp.async feed shared by both grouped GEMMs (grouped_gemm_sm80.cuh, grouped_gemm_sm90.cuh).
//
// A block stages BLOCK_M rows of A and BLOCK_N rows of B per K step of 64 elements. Every row is
// 128 bytes in shared memory with its 16-byte chunks XOR-swizzled by (row % 8): ldmatrix reads it
// without bank conflicts, and from 1024-byte aligned tiles it is the layout wgmma's 128-byte
// swizzle descriptors expect. A thread always copies the same chunk column of a few rows, so it
// finds those rows' sources once, at construction: gathered x rows (kGateUp: pair / (k + S) is the
// token), h rows in sorted order (kDown), x rows 0..T-1 (kRouter); B rows of the expert's gate and
// up (kGateUp: of every SLICE consecutive B rows, the first half are gate rows and the second half
// the up rows of the same output columns, so one warp or warpgroup holds g and u of its columns),
// down (kDown) or the router (kRouter). Rows past a matrix and the K tail are zero-filled.
#pragma once

#include "common.cuh"

namespace rt_moe {

enum GemmMode : int { kGateUp = 0, kDown = 1, kRouter = 2 };

// What the down GEMM's epilogue multiplies a (token, slot) pair's row of y by: its routing weight
// (the top-k weight of a routed slot, 1 for the shared expert's chunks), scaled for y's element
// type Y (YOps::scaled).
template <int K, int SLOTS, typename Y>
__device__ __forceinline__ float pair_weight(const GemmParams& p, int pair) {
  const int token = pair / SLOTS, slot = pair % SLOTS;
  return YOps<Y>::scaled(slot < K ? p.topk_weights[(long long)token * K + slot] : 1.f);
}

// Whether all of expert `expert`'s rows (routed pairs, or every token for a shared chunk) fit
// one block of `block_rows`: then only that block reads the expert's weight tiles.
template <int E>
__device__ __forceinline__ bool expert_rows_fit_block(const GemmParams& p, int expert,
                                                      int block_rows) {
  return (expert < E ? p.expert_counts[expert] : p.tokens) <= block_rows;
}

// The B operand of row block `block_m` in mode MODE: its expert's weights, or the router (all
// three pointers, K = H) in kRouter; `once` set to expert_rows_fit_block (false for the router).
template <int E, int H, int MODE>
__device__ __forceinline__ ExpertWeights block_weights(const GemmParams& p, int block_m,
                                                       int block_rows, bool& once) {
  once = false;
  if (MODE == kRouter) return {p.b, p.b, p.b, H};
  const int expert = p.block_expert[block_m];
  once = expert_rows_fit_block<E>(p, expert, block_rows);
  return p.experts[expert];
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of 128-byte rows swizzled as above.
__device__ __forceinline__ unsigned swizzle_128b(int row, int chunk) {
  return (unsigned)(row * 8 + (chunk ^ (row & 7))) * 16u;
}

template <int H, int I, int E, int SLOTS, int MODE, int BLOCK_M, int BLOCK_N, int THREADS,
          int SLICE>
struct TileLoader {
  static constexpr int kBlockK = 64;
  static constexpr int kChunksPerRow = kBlockK / 8;      // 16-byte chunks of a 128-byte row
  static constexpr int kReduce = MODE == kDown ? I : H;  // the GEMM's K
  static constexpr int kItersA = BLOCK_M * kChunksPerRow / THREADS;
  static constexpr int kItersB = BLOCK_N * kChunksPerRow / THREADS;
  static constexpr int kTileABytes = BLOCK_M * kBlockK * 2;
  static constexpr int kTileBBytes = BLOCK_N * kBlockK * 2;
  static constexpr int kTiles = (kReduce + kBlockK - 1) / kBlockK;

  static_assert(kItersA >= 1 && kItersA * THREADS == BLOCK_M * kChunksPerRow,
                "A tile chunks must divide evenly among the threads");
  static_assert(kItersB >= 1 && kItersB * THREADS == BLOCK_N * kChunksPerRow,
                "B tile chunks must divide evenly among the threads");
  static_assert(MODE != kGateUp || SLICE % 2 == 0, "gate and up take half a slice each");
  static_assert(kReduce % 8 == 0, "K must be a multiple of 8 for 16-byte loads");

  static __device__ __forceinline__ unsigned swizzle(int row, int chunk) {
    return swizzle_128b(row, chunk);
  }

  // The rows this thread copies from, and whether each holds data: a row that is only zero-filled
  // (padding, past the matrix) is `fallback`, a valid address, never null. A null row plus the K
  // offset read address 0x10 on the GPU in the fused tile of stages of 128 (docs/PERF.md 59a);
  // integer offsets from it (59a's row_at) cost the tile's K step 226-248 SASS instructions
  // against 135-152 with these flags (59e). The sm90 ws and swap producers still mark padding
  // rows null in the form that faulted here (their GPU cases with padding pass); there a flag
  // mask spilled 42 bytes at the three-consumer tile's 40 registers and a non-null sentinel
  // 11-23 bytes (60a).
  const unsigned short* a_rows[kItersA];
  const unsigned short* b_rows[kItersB];
  bool a_ok[kItersA];
  bool b_ok[kItersB];
  const unsigned short* fallback;  // a valid address for the zero-filling copies
  int tid;
  int chunk;
  // The block's expert has no other row block (expert_rows_fit_block): its weight tiles are read
  // by this block only, once, so their loads carry an evict-first L2 policy and do not push out of
  // L2 what other blocks still read (x rows, h rows, the shared expert's prefetched rows).
  bool weights_once;
  unsigned long long policy;

  // Row block at row m0, column block n_block (of BLOCK_N B rows).
  __device__ __forceinline__ TileLoader(const GemmParams& p, const ExpertWeights& w, int m0,
                                        int n_block, int thread, bool once = false)
      : fallback(reinterpret_cast<const unsigned short*>(p.a)),
        tid(thread),
        chunk(thread % kChunksPerRow),
        weights_once(once),
        policy(weights_once ? l2_evict_first_policy() : 0) {
#pragma unroll
    for (int j = 0; j < kItersA; ++j) {
      const int r = (tid + j * THREADS) / kChunksPerRow;
      if (MODE == kRouter) {
        a_ok[j] = m0 + r < p.tokens;
        a_rows[j] = a_ok[j] ? fallback + (long long)(m0 + r) * H : fallback;
      } else {
        // A pair of a token past p.tokens is padding too (the fused decode kernel's table of the
        // shared expert's rows is written for the bucket's most tokens).
        const int pair = p.sorted_rows[m0 + r];
        const long long row =
            MODE == kGateUp ? (long long)(pair / SLOTS) * H : (long long)(m0 + r) * I;
        a_ok[j] = pair >= 0 && pair / SLOTS < p.tokens;
        a_rows[j] = a_ok[j] ? fallback + row : fallback;
      }
    }
#pragma unroll
    for (int j = 0; j < kItersB; ++j) {
      const int r = (tid + j * THREADS) / kChunksPerRow;
      if (MODE == kGateUp) {
        const int slice = r / SLICE, q = r % SLICE;
        const int col = n_block * (BLOCK_N / 2) + slice * (SLICE / 2) + q % (SLICE / 2);
        const void* matrix = q < SLICE / 2 ? w.gate : w.up;
        b_ok[j] = col < I;
        b_rows[j] = b_ok[j] ? reinterpret_cast<const unsigned short*>(matrix) + (long long)col * H
                            : fallback;
      } else {
        // kDown: n < H rows of down (stride down_ld); kRouter: n < E router rows (stride H).
        const int n = n_block * BLOCK_N + r;
        b_ok[j] = n < (MODE == kDown ? H : E);
        b_rows[j] = b_ok[j]
                        ? reinterpret_cast<const unsigned short*>(w.down) + (long long)n * w.down_ld
                        : fallback;
      }
    }
  }

  // Issues the cp.async copies of K step `k_tile` into the A and B tiles at these addresses.
  __device__ __forceinline__ void load(unsigned a_smem, unsigned b_smem, int k_tile) const {
    const int k = k_tile * kBlockK + chunk * 8;
    const bool k_ok = k < kReduce;
#pragma unroll
    for (int j = 0; j < kItersA; ++j) {
      const int r = (tid + j * THREADS) / kChunksPerRow;
      const bool ok = k_ok && a_ok[j];
      cp_async_16(a_smem + swizzle_128b(r, chunk), ok ? a_rows[j] + k : fallback, ok);
    }
#pragma unroll
    for (int j = 0; j < kItersB; ++j) {
      const int r = (tid + j * THREADS) / kChunksPerRow;
      const bool ok = k_ok && b_ok[j];
      const unsigned dst = b_smem + swizzle_128b(r, chunk);
      if (weights_once) {
        cp_async_16_hint(dst, ok ? b_rows[j] + k : fallback, ok, policy);
      } else {
        cp_async_16(dst, ok ? b_rows[j] + k : fallback, ok);
      }
    }
  }
};

}  // namespace rt_moe
