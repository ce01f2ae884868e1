// The decode forward's routing after the gating GEMM in one block: top-k, the expert offsets and
// the scatter of the pairs into their experts' rows, where the two-kernel path runs Topk,
// Offsets and Scatter, three launches of a few microseconds each, mostly latency (ncu on the
// H200, DeepSeek-V3 T = 1: 5.7, 4.2 and 2.4 us; docs/PERF.md).
//
// 1024 threads: warp w chooses the experts of tokens w, w + 32, ... (Topk::select, counting in
// shared memory); the block then stores the counts, lays out the experts' rows
// (Offsets::from_counts) and places each pair at the next row of its expert, filling in shared
// memory. For few tokens only (the fused decode tile's buckets of up to kRouteDecodeMaxTokens,
// specs.h): one block does the work of ceil(T / 4) top-k blocks. The same rounding and choices as
// Topk, the same layout as Offsets and Scatter: the forward's output is the same bit for bit.
#pragma once

#include "dispatch.cuh"
#include "routing.cuh"

namespace rt_moe {

template <typename D, int E, int K, int SCORE, bool BIAS, int N_GROUP, int TOPK_GROUP,
          int GROUP_SCORE, bool RENORMALIZE, int S, int BLOCK_M>
struct RouteDecode {
  using Select = Topk<D, E, K, SCORE, BIAS, N_GROUP, TOPK_GROUP, GROUP_SCORE, RENORMALIZE, 32>;
  using Layout = Offsets<E, S, K, BLOCK_M>;
  static constexpr int kThreads = 1024;
  static constexpr int kSmemBytes = 0;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kExperts = E + S;
  static constexpr int kSlots = K + S;
  static_assert(Layout::kThreads == kThreads, "Offsets::from_counts runs on this block");

  static __device__ void run(const RouteDecodeParams& p) {
    __shared__ typename Layout::Shared s;
    __shared__ int fill[kExperts];
    __shared__ float bias[BIAS ? E : 1];
    // The ids of tokens < kWarps, for the scatter.
    __shared__ int ids_copy[kWarps * K];
    grid_dependency_trigger();  // the next kernel may launch now; it waits for this one
    const int T = p.topk.tokens;
    for (int e = threadIdx.x; e < kExperts; e += kThreads) {
      s.counts[e] = e < E ? 0 : T;
      fill[e] = 0;
    }
    // The correction bias is a weight (no kernel of the forward writes it): loaded here, while
    // the router runs, it is off the path after the wait (one DRAM round trip under the expert
    // GEMM's loads, with the L2 flushed or cold).
    if (BIAS) {
      for (int e = threadIdx.x; e < E; e += kThreads) bias[e] = p.topk.bias[e];
    }
    __syncthreads();
    grid_dependency_wait();  // the logits
    for (int token = threadIdx.x / 32; token < T; token += kWarps) {
      Select::template select<1>(p.topk, token, s.counts, BIAS ? bias : p.topk.bias,
                                 token < kWarps ? ids_copy : nullptr);
    }
    __syncthreads();  // the counts, and the ids in shared memory (and this block's stores of them)
    for (int e = threadIdx.x; e < E; e += kThreads) p.offsets.expert_counts[e] = s.counts[e];
    Layout::from_counts(p.offsets, s);
    // The ids from shared memory, not back from L2: one round trip less before the scatter.
    const int* ids = T <= kWarps ? ids_copy : p.topk.topk_ids;
    for (int pair = threadIdx.x; pair < T * kSlots; pair += kThreads) {
      const int token = pair / kSlots, slot = pair % kSlots;
      const int expert = slot < K ? ids[token * K + slot] : E + (slot - K);
      p.offsets.sorted_rows[s.offsets[expert] + atomicAdd(&fill[expert], 1)] = pair;
    }
  }
};

}  // namespace rt_moe
