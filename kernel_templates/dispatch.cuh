// Dispatch: group the (token, slot) pairs by expert, on the device, with no host round trip.
//
// Offsets (one block): per expert (E routed, then S shared chunks that every token visits) the
// count (top-k's count lines, stored densely for the GEMMs) padded to BLOCK_M, an exclusive scan of
// those into padded_offsets, the expert of every row block, the number of row blocks, -1 in each
// expert's padding rows, and the fill counters zeroed for the scatter. With EVEN (the swapped
// tiles) a routed expert's rows are spread evenly over its blocks (EvenBlocks, even_blocks.h): the
// padding rows are each block's last, not the expert's.
//
// Scatter (one thread per pair, THREADS pairs a block): a block counts its pairs of each routed
// expert in shared memory, takes that many rows of the expert's range with one atomic add on the
// expert's fill counter, and gives each pair one of them: one global atomic per (block, expert)
// instead of one a pair (131 K returning adds on 256 counters serialized in L2 at DeepSeek-V3 T =
// 16384). A shared chunk's rows are its tokens in order. Rows within a routed expert may come in
// any order from run to run; every output row depends only on its own inputs, so the forward's
// result is the same bit for bit.
#pragma once

#include "common.cuh"
#include "even_blocks.h"

namespace rt_moe {

template <int E, int S, int K, int BLOCK_M, bool EVEN = false>
struct Offsets {
  static constexpr int kThreads = 1024;
  static constexpr int kSmemBytes = 0;
  static constexpr int kExperts = E + S;
  static constexpr int kPerLane = (kExperts + 31) / 32;  // experts each lane of warp 0 scans

  // The block's working set: per expert its count, padded count and start row (and the end).
  struct Shared {
    int counts[kExperts];
    int padded[kExperts + 1];
    int offsets[kExperts + 1];
  };

  static __device__ void run(const OffsetsParams& p) {
    __shared__ Shared s;
    grid_dependency_trigger();  // the next kernel may launch now; it waits for this one
    grid_dependency_wait();     // the counts of top-k
    for (int e = threadIdx.x; e < kExperts; e += kThreads) {
      s.counts[e] = e < E ? p.count_lines[e * kCounterStride] : p.tokens;
      if (e < E) {
        p.expert_counts[e] = s.counts[e];
        p.expert_fill[e * kCounterStride] = 0;
      }
    }
    __syncthreads();
    from_counts(p, s);
  }

  // Everything but the fill counters from s.counts (the routed experts' counts, then `tokens`
  // for each shared chunk), which the block has written and synchronized. On return every
  // thread may read s.offsets (the experts' start rows).
  static __device__ void from_counts(const OffsetsParams& p, Shared& s) {
    int* const counts = s.counts;
    int* const padded = s.padded;
    int* const offsets = s.offsets;
    for (int e = threadIdx.x; e < kExperts; e += kThreads) {
      padded[e] = (counts[e] + BLOCK_M - 1) / BLOCK_M * BLOCK_M;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l scans experts [l * kPerLane, (l + 1) * kPerLane), then the lanes scan their sums.
      const int lane = threadIdx.x;
      int local = 0;
      for (int i = 0; i < kPerLane; ++i) {
        int e = lane * kPerLane + i;
        if (e < kExperts) local += padded[e];
      }
      int inclusive = local;
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        int other = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += other;
      }
      int running = inclusive - local;
      for (int i = 0; i < kPerLane; ++i) {
        int e = lane * kPerLane + i;
        if (e < kExperts) {
          offsets[e] = running;
          running += padded[e];
        }
      }
      if (lane == 31) offsets[kExperts] = inclusive;
    }
    __syncthreads();
    const int total_blocks = offsets[kExperts] / BLOCK_M;
    // The host sizes max_blocks for the worst case of this bucket; clamping only guards memory.
    const int blocks = total_blocks < p.max_blocks ? total_blocks : p.max_blocks;
    if (threadIdx.x == 0) *p.num_blocks = blocks;
    for (int e = threadIdx.x; e <= kExperts; e += kThreads) p.padded_offsets[e] = offsets[e];
    // A warp an expert, its lanes on consecutive rows and blocks: coalesced stores. (A thread an
    // expert wrote its up to BLOCK_M - 1 padding rows one by one, each warp store touching 32
    // lines: 15-17 us for this kernel at DeepSeek-V3 T = 512 and 4096 on the H200, by ncu.)
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int rows_in_use = blocks * BLOCK_M;
    for (int e = warp; e < kExperts; e += kThreads / 32) {
      const int begin = offsets[e], end = begin + padded[e];
      if (EVEN && e < E) {
        const EvenBlocks even(counts[e], BLOCK_M);
        for (int r = begin + lane; r < end && r < rows_in_use; r += 32) {
          if ((r - begin) % BLOCK_M >= even.rows((r - begin) / BLOCK_M)) p.sorted_rows[r] = -1;
        }
      } else {
        for (int r = begin + counts[e] + lane; r < end && r < rows_in_use; r += 32) {
          p.sorted_rows[r] = -1;
        }
      }
      for (int b = begin / BLOCK_M + lane; b < end / BLOCK_M && b < blocks; b += 32) {
        p.block_expert[b] = e;
      }
    }
  }
};

// EVEN_BLOCK: the block rows of the even layout (the Offsets kernel's EVEN), 0 for the packed one.
template <int E, int S, int K, int THREADS, int EVEN_BLOCK = 0>
struct Scatter {
  static constexpr int kThreads = THREADS;
  static constexpr int kSmemBytes = 0;
  static constexpr int kSlots = K + S;

  static __device__ void run(const ScatterParams& p) {
    __shared__ int taken[E];    // this block's pairs of each routed expert
    __shared__ int first[E];    // the first of the rows they take, past the expert's start
    grid_dependency_trigger();  // the next kernel may launch now; it waits for this one
    for (int e = threadIdx.x; e < E; e += kThreads) taken[e] = 0;
    __syncthreads();
    grid_dependency_wait();  // the ids of top-k, the offsets and zeroed fill counters
    const long long pair = (long long)blockIdx.x * kThreads + threadIdx.x;
    int expert = -1, rank = 0;
    if (pair < (long long)p.tokens * kSlots) {
      const int token = (int)(pair / kSlots), slot = (int)(pair % kSlots);
      if (slot < K) {
        expert = p.topk_ids[(long long)token * K + slot];
        rank = atomicAdd(&taken[expert], 1);
      } else {
        p.sorted_rows[p.padded_offsets[E + slot - K] + token] = (int)pair;
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += kThreads) {
      if (taken[e] > 0) first[e] = atomicAdd(&p.expert_fill[e * kCounterStride], taken[e]);
    }
    __syncthreads();
    if (expert >= 0) {
      int row = first[expert] + rank;
      if (EVEN_BLOCK > 0)
        row = EvenBlocks(p.expert_counts[expert], EVEN_BLOCK).row(row, EVEN_BLOCK);
      p.sorted_rows[p.padded_offsets[expert] + row] = (int)pair;
    }
  }
};

}  // namespace rt_moe
