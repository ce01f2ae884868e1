// Routing: the gating GEMM (logits), then softmax and top-k per token.
//
// RouterLogits: one warp per expert, TOKENS tokens per block. Each lane walks the hidden
// dimension in 16-byte chunks, loading the router row once and reusing it for the block's tokens;
// a warp reduction finishes each dot product. Logits are rounded to the activation dtype, as the
// reference does.
//
// Topk: one warp per token. Each lane holds E/32 logits; softmax in fp32, probs rounded to the
// dtype, then k rounds of a warp arg-max (ties toward the lower expert index). NaN probs sort
// below every real prob, so a token with NaN input still gets k valid, distinct expert ids and its
// NaN weights stay in its own output row.
#pragma once

#include "common.cuh"

namespace rt_moe {

template <typename D, int H, int E, int TOKENS, int WARPS>
struct RouterLogits {
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kSmemBytes = 0;
  static_assert(H % 8 == 0, "rows are read in 16-byte chunks of 8 elements");

  static __device__ void run(const RouterParams& p) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // Tokens along x (up to 2^31 - 1 blocks), experts along y (E / WARPS blocks).
    const int expert = blockIdx.y * WARPS + warp;
    const int t0 = blockIdx.x * TOKENS;
    if (expert >= E || t0 >= p.tokens) return;
    const Vec8* router = reinterpret_cast<const Vec8*>(p.router) + (long long)expert * (H / 8);
    const Vec8* x = reinterpret_cast<const Vec8*>(p.x) + (long long)t0 * (H / 8);
    float acc[TOKENS];
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) acc[t] = 0.f;
    // Unrolled so several 16-byte loads are in flight per lane: a lone warp per expert row is
    // latency-bound otherwise (decode reads the whole router with one wave of warps).
#pragma unroll 4
    for (int c = lane; c < H / 8; c += 32) {
      float r[8];
      unpack8<D>(router[c], r);
#pragma unroll
      for (int t = 0; t < TOKENS; ++t) {
        if (t0 + t < p.tokens) {
          float v[8];
          unpack8<D>(x[(long long)t * (H / 8) + c], v);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[t] = fmaf(v[i], r[i], acc[t]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
      float sum = warp_sum(acc[t]);
      if (lane == 0 && t0 + t < p.tokens) {
        p.logits[(long long)(t0 + t) * E + expert] = round_to<D>(sum);
      }
    }
  }
};

template <typename D, int E, int K, bool RENORMALIZE, int WARPS>
struct Topk {
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kSmemBytes = 0;
  static constexpr int kPerLane = (E + 31) / 32;
  static_assert(K >= 1 && K <= E, "top_k must be in [1, E]");

  // Selection order: larger prob first, then lower index. NaN ranks below every prob.
  static __device__ __forceinline__ float rank_value(float prob) {
    return prob == prob ? prob : -2.0f;
  }
  static __device__ __forceinline__ bool better(float a, int ia, float b, int ib) {
    return a > b || (a == b && ia < ib);
  }

  static __device__ void run(const TopkParams& p) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int token = blockIdx.x * WARPS + warp;
    if (token >= p.tokens) return;
    const float* logits = p.logits + (long long)token * E;

    float prob[kPerLane];
    float m = -__int_as_float(0x7f800000);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      int e = lane + 32 * i;
      prob[i] = e < E ? logits[e] : -__int_as_float(0x7f800000);
      m = fmaxf(m, prob[i]);
    }
    m = warp_max(m);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      prob[i] = lane + 32 * i < E ? expf(prob[i] - m) : 0.f;
      sum += prob[i];
    }
    sum = warp_sum(sum);
    // A NaN logit makes m or sum NaN, and every prob of this token NaN: it stays in its row.
    float rank[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      prob[i] = round_to<D>(prob[i] / sum);
      rank[i] = lane + 32 * i < E ? rank_value(prob[i]) : -4.0f;
    }

    float chosen_prob = 0.f;  // lane j keeps the j-th choice (K <= 64: lanes j and j + 32)
    float chosen_prob_hi = 0.f;
    int chosen_id = 0, chosen_id_hi = 0;
    float weight_sum = 0.f;
    for (int j = 0; j < K; ++j) {
      float best = -3.0f;
      int best_id = E;
      float best_prob = 0.f;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        int e = lane + 32 * i;
        if (better(rank[i], e, best, best_id)) {
          best = rank[i];
          best_id = e;
          best_prob = prob[i];
        }
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
        float other = __shfl_xor_sync(0xffffffffu, best, offset);
        int other_id = __shfl_xor_sync(0xffffffffu, best_id, offset);
        float other_prob = __shfl_xor_sync(0xffffffffu, best_prob, offset);
        if (better(other, other_id, best, best_id)) {
          best = other;
          best_id = other_id;
          best_prob = other_prob;
        }
      }
      // Take it out of the owner's candidates.
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        if (lane + 32 * i == best_id) rank[i] = -3.5f;
      }
      weight_sum += best_prob;
      if (lane == (j & 31)) {
        if (j < 32) {
          chosen_prob = best_prob;
          chosen_id = best_id;
        } else {
          chosen_prob_hi = best_prob;
          chosen_id_hi = best_id;
        }
      }
    }
    const float scale = p.routed_scaling_factor;
    auto emit = [&](int j, int id, float w) {
      if (RENORMALIZE) w = w / weight_sum;
      w = round_to<D>(w * scale);
      p.topk_ids[(long long)token * K + j] = id;
      p.topk_weights[(long long)token * K + j] = w;
      atomicAdd(&p.expert_counts[id], 1);
    };
    if (lane < K) emit(lane, chosen_id, chosen_prob);
    if (lane + 32 < K) emit(lane + 32, chosen_id_hi, chosen_prob_hi);
  }
};

}  // namespace rt_moe
