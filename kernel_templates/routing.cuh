// Routing: the gating GEMM (logits), then scores and top-k per token (REFERENCE.md sections 1
// and 4; the knobs are RoutingConfig's, config.h).
//
// RouterLogits: logits (T, E) = x (T, H) times router (E, H) transposed, for few tokens: a GEMV
// bound by loads in flight (DeepSeek-V3: 3.7 MB of router for 14 KB of x a token). A block holds
// TOKENS tokens and some router rows; the threads of a row split it in 16-byte chunks, thread j
// taking chunks j, j + n, j + 2n, ... (n threads a row). A thread issues the router loads of up
// to 8 of its chunks at once (past L1), then per token the x loads of the same chunks, reusing
// each router chunk for the block's tokens, and accumulates in fp32 in chunk order; a warp sum,
// then the sum of the row's warps in warp order (shared memory), finish each dot product. The
// host picks one of two layouts by the grid's height (gridDim.y):
//   ceil(E / (WARPS / SPLIT)): SPLIT warps a row, WARPS / SPLIT rows a block. For few tokens:
//     DeepSeek-V3 at T = 1 runs 128 blocks of 2 rows, each thread 7 router loads in flight, so
//     the whole router is requested at once from every SM, not by 32 blocks in 7 rounds.
//   ceil(E / WARPS): one warp a row, WARPS rows a block sharing x through L1. For more tokens,
//     where there are blocks enough and the x rereads of the split layout would cost more than
//     they save; it sums in the same order as the one-warp-a-row kernel it replaces.
// Logits are rounded to the activation dtype when ROUND_LOGITS, as the reference does, else kept
// in fp32 (Qwen3, Mixtral).
//
// Topk: one warp per token, expert e in lane e % 32, register e / 32. Rounding points (the CPU
// reference, tests/support/reference.h, has the same ones):
//   1. score s_e: softmax over all E in fp32 (max-subtracted), or sigmoid 1 / (1 + exp(-l)) in
//      fp32; rounded to the dtype;
//   2. selection value v_e = s_e + bias_e in fp32 (BIAS: DeepSeek-V3's correction bias), else s_e;
//   3. N_GROUP > 1: group g holds experts [g G, (g + 1) G), G = E / N_GROUP; it scores the max of
//      its v (kGroupMax) or the fp32 sum of its two largest v (kGroupSumTop2); the TOPK_GROUP
//      best groups are kept (ties toward the lower group index), every lane choosing the same
//      groups from the warp-reduced group scores; experts of other groups can not be chosen;
//   4. K rounds of a warp arg-max over v, ties toward the lower expert index;
//   5. weights: the chosen experts' s (unbiased), divided by their fp32 sum taken in selection
//      order when RENORMALIZE, times routed_scaling_factor, rounded to the dtype.
// NaN ranks as -inf (below every real value; the lower index wins a tie with a real -inf), so a
// token with NaN input still gets K valid, distinct expert ids and its NaN weights stay in its
// own output row. A group score that is NaN (inf + -inf) ranks as -inf too.
//
// Cost model (per token, one warp; nothing here is tuned): reads E fp32 logits once (and E fp32
// bias values, the same for every token, so L2-resident), writes K ids and weights and K counter
// atomics. Arithmetic per lane: E/32 exp (+ one division each); per group, E/32 compares and 5
// shuffle steps (2 shuffles each for kGroupSumTop2); the group choice, TOPK_GROUP x N_GROUP
// compares in registers; per chosen expert, E/32 compares and 5 steps of 3 shuffles. DeepSeek-V3
// (E = 256, K = 8, 8 groups): ~8 exp, ~40 + ~120 shuffles per lane. At decode (T = 1) the kernel
// is one warp and costs its latency, a few microseconds; at T = 16384 it reads 16 MB of logits,
// a few microseconds of HBM time, next to milliseconds of expert GEMMs.
#pragma once

#include "common.cuh"

namespace rt_moe {

template <typename D, int H, int E, int TOKENS, int WARPS, int SPLIT, bool ROUND_LOGITS>
struct RouterLogits {
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kSmemBytes = 0;
  static constexpr int kChunks = H / 8;  // 16-byte chunks of a row of x or of the router
  static_assert(H % 8 == 0, "rows are read in 16-byte chunks of 8 elements");
  static_assert(TOKENS >= 1, "a block holds at least one token");
  static_assert(SPLIT >= 1 && WARPS % SPLIT == 0, "a block holds whole rows: WARPS / SPLIT");
  static_assert(TOKENS * (WARPS / SPLIT) <= kThreads, "one thread finishes each (token, row)");

  // The dot products of tokens [t0, t0 + TOKENS) with the block's WARPS / S router rows, S warps
  // a row.
  template <int S>
  static __device__ __forceinline__ void rows(const RouterParams& p, int t0) {
    constexpr int kRows = WARPS / S;
    constexpr int kStride = 32 * S;                            // threads of a row
    constexpr int kSteps = (kChunks + kStride - 1) / kStride;  // chunks of a thread
    // Batches of at most 8 chunks: 8 router loads (and 8 x loads a token) in flight a thread,
    // 32 + 32 registers.
    constexpr int kBatches = (kSteps + 7) / 8;
    constexpr int kBatch = (kSteps + kBatches - 1) / kBatches;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int j = (warp % S) * 32 + lane;  // this thread's place in its row
    const int expert = blockIdx.y * kRows + warp / S;
    const bool active = expert < E;
    const Vec8* router =
        reinterpret_cast<const Vec8*>(p.router) + (long long)(active ? expert : 0) * kChunks;
    const Vec8* x = reinterpret_cast<const Vec8*>(p.x) + (long long)t0 * kChunks;
    float acc[TOKENS];
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) acc[t] = 0.f;
#pragma unroll 1
    for (int b = 0; b < kBatches; ++b) {
      // Chunk c = j + kStride s of the row, s = b kBatch + i: in order of s, so with S = 1 every
      // lane sums the same chunks in the same order as one warp a row always did.
      Vec8 r[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int c = j + kStride * (b * kBatch + i);
        if (active && c < kChunks) r[i] = load_streaming_16(router + c);  // past L1, which keeps x
      }
#pragma unroll
      for (int t = 0; t < TOKENS; ++t) {
        if (t0 + t < p.tokens) {
          Vec8 v[kBatch];
#pragma unroll
          for (int i = 0; i < kBatch; ++i) {
            const int c = j + kStride * (b * kBatch + i);
            if (active && c < kChunks) v[i] = x[(long long)t * kChunks + c];
          }
#pragma unroll
          for (int i = 0; i < kBatch; ++i) {
            const int c = j + kStride * (b * kBatch + i);
            if (active && c < kChunks) {
              float xf[8], rf[8];
              unpack8<D>(v[i], xf);
              unpack8<D>(r[i], rf);
#pragma unroll
              for (int e = 0; e < 8; ++e) acc[t] = fmaf(xf[e], rf[e], acc[t]);
            }
          }
        }
      }
    }
    auto store = [&](int t, int e, float sum) {
      p.logits[(long long)(t0 + t) * E + e] = ROUND_LOGITS ? round_to<D>(sum) : sum;
    };
    if constexpr (S == 1) {
#pragma unroll
      for (int t = 0; t < TOKENS; ++t) {
        const float sum = warp_sum(acc[t]);
        if (lane == 0 && active && t0 + t < p.tokens) store(t, expert, sum);
      }
    } else {
      __shared__ float partial[TOKENS][WARPS];  // (token, warp) warp sums
#pragma unroll
      for (int t = 0; t < TOKENS; ++t) {
        const float sum = warp_sum(acc[t]);
        if (lane == 0) partial[t][warp] = sum;
      }
      __syncthreads();
      // Thread (t, row) adds the row's S warp sums in warp order.
      const int t = threadIdx.x / kRows, row = threadIdx.x % kRows;
      const int e = blockIdx.y * kRows + row;
      if (t < TOKENS && e < E && t0 + t < p.tokens) {
        float sum = partial[t][row * S];
#pragma unroll
        for (int k = 1; k < S; ++k) sum += partial[t][row * S + k];
        store(t, e, sum);
      }
    }
  }

  static __device__ void run(const RouterParams& p) {
    // The forward's first kernel, launched programmatically after the caller's work: it waits
    // for that (and the last forward's combine, which zeroes the counters and reads y) before it
    // lets the next kernels launch, as the fused decode GEMM takes tickets and writes the shared
    // expert's h and y rows before its own wait.
    grid_dependency_wait();
    grid_dependency_trigger();
    const int t0 = blockIdx.x * TOKENS;
    if (t0 >= p.tokens) return;  // the whole block
    // The grid's height says the layout: SPLIT warps a row when it holds every expert that way.
    if (gridDim.y * (WARPS / SPLIT) >= E) {
      rows<SPLIT>(p, t0);
    } else {
      rows<1>(p, t0);
    }
  }
};

enum RoutingScore : int { kScoreSoftmax = 0, kScoreSigmoid = 1 };
enum GroupScore : int { kGroupMax = 0, kGroupSumTop2 = 1 };

template <typename D, int E, int K, int SCORE, bool BIAS, int N_GROUP, int TOPK_GROUP,
          int GROUP_SCORE, bool RENORMALIZE, int WARPS>
struct Topk {
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kSmemBytes = 0;
  static constexpr int kPerLane = (E + 31) / 32;
  static constexpr int kGroupSize = E / N_GROUP;
  // The key of an expert that can not be chosen: padding, already chosen, or outside the kept
  // groups. Every real value (NaN too) has a larger key.
  static constexpr int kExcluded = -2147483647 - 1;
  static_assert(SCORE == kScoreSoftmax || SCORE == kScoreSigmoid, "score: softmax or sigmoid");
  static_assert(K >= 1 && K <= E && K <= 64, "top_k must be in [1, min(E, 64)] (lanes j, j + 32)");
  static_assert(N_GROUP >= 1 && N_GROUP <= 32 && E % N_GROUP == 0,
                "N_GROUP groups of E / N_GROUP consecutive experts, one bit each in a 32-bit mask");
  static_assert(TOPK_GROUP >= 1 && TOPK_GROUP <= N_GROUP, "TOPK_GROUP must be in [1, N_GROUP]");
  static_assert(K <= TOPK_GROUP * kGroupSize, "the kept groups must hold at least K experts");
  static_assert(GROUP_SCORE == kGroupMax || N_GROUP == 1 || kGroupSize >= 2,
                "a group's sum of its top 2 needs groups of 2 or more experts");

  static __device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }
  // Selection order on values: NaN ranks as -inf.
  static __device__ __forceinline__ float rank_value(float v) { return v == v ? v : neg_inf(); }
  // An int that orders as rank_value does (larger value, larger key), with -0 equal to +0, so
  // the arg-max compares integers and sentinels (kExcluded) sit below every real value.
  static __device__ __forceinline__ int order_key(float v) {
    v = rank_value(v);
    if (v == 0.f) v = 0.f;
    const int bits = __float_as_int(v);
    return bits >= 0 ? bits : bits ^ 0x7fffffff;
  }

  // The mask of kept groups (bit g: group g), the same in every lane.
  static __device__ __forceinline__ unsigned kept_groups(const float (&value)[kPerLane], int lane) {
    int group_of[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + 32 * i;
      group_of[i] = e < E ? e / kGroupSize : -1;
    }
    float group_score[N_GROUP];
#pragma unroll
    for (int g = 0; g < N_GROUP; ++g) {
      // This lane's two largest values of group g, then the warp's (a merge of top-2 pairs).
      float top1 = neg_inf(), top2 = neg_inf();
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        if (group_of[i] == g) {
          const float v = rank_value(value[i]);
          top2 = fmaxf(top2, fminf(top1, v));
          top1 = fmaxf(top1, v);
        }
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
        const float other1 = __shfl_xor_sync(0xffffffffu, top1, offset);
        if (GROUP_SCORE == kGroupSumTop2) {
          const float other2 = __shfl_xor_sync(0xffffffffu, top2, offset);
          top2 = fmaxf(fminf(top1, other1), fmaxf(top2, other2));
        }
        top1 = fmaxf(top1, other1);
      }
      group_score[g] = rank_value(GROUP_SCORE == kGroupSumTop2 ? top1 + top2 : top1);
    }
    unsigned kept = 0;
#pragma unroll
    for (int r = 0; r < TOPK_GROUP; ++r) {
      int best = -1;
      float best_score = neg_inf();
#pragma unroll
      for (int g = 0; g < N_GROUP; ++g) {
        if (!((kept >> g) & 1u) && (best < 0 || group_score[g] > best_score)) {
          best = g;
          best_score = group_score[g];
        }
      }
      kept |= 1u << best;
    }
    return kept;
  }

  static __device__ void run(const TopkParams& p) {
    grid_dependency_trigger();  // the next kernel may launch now; it waits for this one
    grid_dependency_wait();     // the logits (and the counts, zero since the last combine)
    const int token = blockIdx.x * WARPS + threadIdx.x / 32;
    if (token < p.tokens) select<kCounterStride>(p, token, p.count_lines, p.bias);
  }

  // One token's choice by one whole warp: writes its K ids and weights and adds one to
  // counts[expert * STRIDE] (global count lines, or shared memory) of each chosen expert. `bias`
  // is p.bias or a copy of it (shared memory: RouteDecode loads it before its dependency wait);
  // with `ids_copy` the ids also go to ids_copy[token K + j] (shared memory, for the caller).
  template <int STRIDE>
  static __device__ void select(const TopkParams& p, int token, int* counts, const float* bias,
                                int* ids_copy = nullptr) {
    const int lane = threadIdx.x % 32;
    const float* logits = p.logits + (long long)token * E;
    // This lane's logits: the router's, or the sum of the K split's partial logits in part order
    // (the loads of four parts in flight at a time), rounded to the dtype when round_logits.
    float logit[kPerLane];
    if (p.logit_splits == 1) {
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int e = lane + 32 * i;
        logit[i] = e < E ? logits[e] : 0.f;
      }
    } else {
      const long long part_stride = (long long)p.tokens * E;
      auto part_logit = [&](int part, int i) {
        const int e = lane + 32 * i;
        return e < E ? logits[part * part_stride + e] : 0.f;
      };
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) logit[i] = 0.f;
      int part = 0;
      for (; part + 4 <= p.logit_splits; part += 4) {
        float v[4][kPerLane];
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
          for (int i = 0; i < kPerLane; ++i) v[q][i] = part_logit(part + q, i);
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
          for (int i = 0; i < kPerLane; ++i) logit[i] += v[q][i];
      }
      for (; part < p.logit_splits; ++part)
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) logit[i] += part_logit(part, i);
      if (p.round_logits) {
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) logit[i] = round_to<D>(logit[i]);
      }
    }

    float score[kPerLane];  // s: dtype-rounded softmax probs or sigmoid scores
    if (SCORE == kScoreSoftmax) {
      float m = neg_inf();
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        int e = lane + 32 * i;
        score[i] = e < E ? logit[i] : neg_inf();
        m = fmaxf(m, score[i]);
      }
      m = warp_max(m);
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        score[i] = lane + 32 * i < E ? expf(score[i] - m) : 0.f;
        sum += score[i];
      }
      sum = warp_sum(sum);
      // A NaN logit makes m or sum NaN, and every prob of this token NaN: it stays in its row.
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) score[i] = round_to<D>(score[i] / sum);
    } else {
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        int e = lane + 32 * i;
        score[i] = e < E ? round_to<D>(1.f / (1.f + expf(-logit[i]))) : 0.f;
      }
    }

    int key[kPerLane];
    {
      float value[kPerLane];  // v: what the selection ranks
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        int e = lane + 32 * i;
        value[i] = BIAS && e < E ? score[i] + bias[e] : score[i];
        key[i] = e < E ? order_key(value[i]) : kExcluded;
      }
      if (N_GROUP > 1) {
        const unsigned kept = kept_groups(value, lane);
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          int e = lane + 32 * i;
          if (e < E && !((kept >> (e / kGroupSize)) & 1u)) key[i] = kExcluded;
        }
      }
    }

    float chosen_score = 0.f;  // lane j keeps the j-th choice (K <= 64: lanes j and j + 32)
    float chosen_score_hi = 0.f;
    int chosen_id = 0, chosen_id_hi = 0;
    float weight_sum = 0.f;
    for (int j = 0; j < K; ++j) {
      // (key, -id) arg-max. A lane holding only excluded experts may carry one here, but the
      // kept groups hold at least K experts, so a real key wins the warp reduction.
      int best = kExcluded;
      int best_id = E;
      float best_score = 0.f;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        int e = lane + 32 * i;
        if (key[i] > best || (key[i] == best && e < best_id)) {
          best = key[i];
          best_id = e;
          best_score = score[i];
        }
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
        int other = __shfl_xor_sync(0xffffffffu, best, offset);
        int other_id = __shfl_xor_sync(0xffffffffu, best_id, offset);
        float other_score = __shfl_xor_sync(0xffffffffu, best_score, offset);
        if (other > best || (other == best && other_id < best_id)) {
          best = other;
          best_id = other_id;
          best_score = other_score;
        }
      }
      // Take it out of the owner's candidates.
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        if (lane + 32 * i == best_id) key[i] = kExcluded;
      }
      weight_sum += best_score;
      if (lane == (j & 31)) {
        if (j < 32) {
          chosen_score = best_score;
          chosen_id = best_id;
        } else {
          chosen_score_hi = best_score;
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
      if (ids_copy != nullptr) ids_copy[token * K + j] = id;
      atomicAdd(&counts[id * STRIDE], 1);
    };
    if (lane < K) emit(lane, chosen_id, chosen_score);
    if (lane + 32 < K) emit(lane + 32, chosen_id_hi, chosen_score_hi);
  }
};

}  // namespace rt_moe
