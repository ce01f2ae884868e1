// The CPU reference of the MoE forward (../shared/REFERENCE.md), for tests and the benchmark's
// --check. Inputs are already rounded to the activation dtype (stored as raw 16-bit patterns);
// arithmetic is fp32 with the rounding points of the GPU pipeline (kernel_templates/routing.cuh):
//   logits (fp32 dot) -> dtype, or kept fp32 with routing.logits_fp32;
//   scores s = softmax in fp32 over all E -> dtype, or s = 1 / (1 + exp(-logit)) in fp32 -> dtype;
//   selection values v = s + router_bias in fp32 with routing.correction_bias, else s;
//   n_group > 1: group scores (max of the group's v, or the fp32 sum of its two largest) choose
//   topk_group groups (ties toward the lower group index); top-k on v among the experts of the
//   kept groups, ties toward the lower expert index; NaN ranks as -inf;
//   weights = the chosen s (unbiased), / their fp32 sum in selection order when renormalize,
//   * routed_scaling_factor, -> dtype;
//   h = dtype(SiLU(g) * u) with g, u fp32 dot products (h is the down GEMM's dtype input);
//   y = dot(h, w_down) * weight in fp32 (kept in fp32: a dtype y would cost up to one ulp of the
//   largest slot, more than the 1e-2 rule allows for bf16 outputs near cancellation);
//   out = dtype(sum over slots in order: routed slots 0..k-1 as chosen, then S shared chunks).
// The shared expert of width S*I is computed as S chunks of width I, each with weight 1 (the same
// function: the down projection sums over the intermediate dimension).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rt_moe/config.h"

namespace rt_moe::test {

// fp16 / bf16 <-> fp32, round to nearest even; NaN stays NaN, overflow goes to Inf.
std::uint16_t float_to_bits(DType dtype, float value);
float bits_to_float(DType dtype, std::uint16_t bits);
inline float round_to(DType dtype, float value) {
  return bits_to_float(dtype, float_to_bits(dtype, value));
}

// N(0, 1) * scale rounded to `dtype`, from a counter-based generator: the same (seed, index) gives
// the same value whatever the thread count. Uses all hardware threads.
void fill_random(std::span<std::uint16_t> out, DType dtype, float scale, std::uint64_t seed);

// Host weights in the layouts of REFERENCE.md section 1, raw dtype bits.
struct HostWeights {
  std::vector<std::uint16_t> router;       // [E, H]
  std::vector<std::uint16_t> gate, up;     // [E, I, H]
  std::vector<std::uint16_t> down;         // [E, H, I]
  std::vector<std::uint16_t> shared_gate;  // [S*I, H] (empty when S == 0)
  std::vector<std::uint16_t> shared_up;    // [S*I, H]
  std::vector<std::uint16_t> shared_down;  // [H, S*I]
  std::vector<float> router_bias;          // [E] fp32 correction bias (routing.correction_bias)
};

// The reference generator's scales: router ~ randn/sqrt(H); gate, up ~ randn/sqrt(I);
// down ~ randn/sqrt(H); shared gate/up ~ randn/sqrt(S*I), shared down ~ randn/sqrt(H).
// router_bias ~ randn * 0.01 in fp32 (always made; used only when the config says so): a few bf16
// ulps of a sigmoid score, enough to change some selections.
HostWeights random_weights(const MoeConfig& config, std::uint64_t seed);
std::vector<std::uint16_t> random_activations(const MoeConfig& config, std::int64_t tokens,
                                              std::uint64_t seed);  // [T, H] ~ randn

// Balanced routing, for benchmarks: every expert receives T k / E rows (where E divides T k), the
// work cuBLAS's batched GEMMs see. Token t goes to the k experts (t k + j) mod E, j < k, all of
// equal weight: balance_router makes router row e the unit vector on x's element e, and
// balance_activations sets x's first E elements of each token to +2 for its experts and -2 for
// the others (the rest of x stays as it was, ~randn), so each chosen logit leads the others by 4
// and x keeps about its norm (+-8 tripled it; docs/PERF.md 23a). Needs H >= E; with group-limited
// routing, the k consecutive experts must lie in kept groups (DeepSeek-V3: 8 of one group of 32).
void balance_router(const MoeConfig& config, HostWeights& weights);
void balance_activations(const MoeConfig& config, std::span<std::uint16_t> x, std::int64_t tokens);

// A layer of shape (H, I, E, S, k) with the reference's default routing.
inline MoeConfig make_config(std::int64_t H, std::int64_t I, std::int64_t E, std::int64_t S,
                             std::int64_t k, DType dtype) {
  return MoeConfig{.d_hidden = H,
                   .d_expert = I,
                   .n_routed_experts = E,
                   .n_shared_experts = S,
                   .top_k = k,
                   .dtype = dtype};
}

// DeepSeek-V2's routing, as in the deepseek-v2 preset: softmax, 8 groups keep 3 by max, not
// renormalised, x16. Tests put it on small shapes.
inline RoutingConfig deepseek_v2_routing() {
  RoutingConfig r;
  r.n_group = 8;
  r.topk_group = 3;
  r.group_score = RoutingConfig::GroupScore::kMax;
  r.routed_scaling_factor = 16.0f;
  return r;
}

struct Routing {
  std::int64_t tokens = 0;
  std::int64_t top_k = 0;
  std::vector<std::int32_t> ids;     // [T, k] chosen experts, in selection order (decreasing v)
  std::vector<float> weights;        // [T, k] their weights (dtype values)
  std::vector<float> probs;          // [T, E] every score s: dtype-rounded softmax prob or sigmoid
  std::vector<float> selection;      // [T, E] what top-k ranks: v = s (+ bias); empty: probs
  std::vector<float> max_abs_logit;  // [T] largest |logit| of each token
};

// `router_bias` ([E] fp32) is required when config.routing.correction_bias, ignored otherwise.
Routing reference_routing(const MoeConfig& config, std::span<const std::uint16_t> x,
                          std::span<const std::uint16_t> router, std::int64_t tokens,
                          std::span<const float> router_bias = {});

// The forward for the listed tokens only (all when `token_subset` is empty), with the given
// routing decisions (ids and weights [T, k]). Returns fp32 values of the dtype-rounded outputs,
// [token_subset.size() or T, H]. Multi-threaded over tokens.
std::vector<float> reference_forward(const MoeConfig& config, const HostWeights& weights,
                                     std::span<const std::uint16_t> x, std::int64_t tokens,
                                     std::span<const std::int32_t> ids,
                                     std::span<const float> topk_weights,
                                     std::span<const std::int64_t> token_subset = {});

// The accuracy rule of REFERENCE.md section 2: |out - ref| <= atol + rtol * |ref|, NaN/Inf where
// ref is finite fails. `out` holds dtype bits, rows of `cols` elements.
struct Comparison {
  bool pass = false;
  std::int64_t checked = 0;
  std::int64_t bad = 0;
  std::int64_t first_bad_row = -1, first_bad_col = -1;
  float first_bad_out = 0, first_bad_ref = 0;
  double max_abs_err = 0;
  double rel_l2 = 0;             // ||out - ref|| / ||ref||
  std::string describe() const;  // one line, with the first bad coordinate
};
Comparison compare(DType dtype, std::span<const std::uint16_t> out, std::span<const float> ref,
                   std::int64_t cols, double atol = 1e-2, double rtol = 1e-2);

// Routing check of REFERENCE.md section 2: returns a description of the first token whose
// choice is not the reference's up to near-ties, or whose weights differ from the reference's by
// more than near-ties allow; empty when all tokens agree.
//
// "One ulp" is taken at the logits, where the GPU and the reference can differ: a logit rounded to
// the dtype can land one ulp apart when the fp32 dot products sum in another order (with fp32
// logits the difference is far smaller; the same bound is used). One ulp u of a logit moves a
// score s by at most tol(s) = s * (exp(2u) - 1) + ulp(s) for softmax (the logit and the
// normaliser both move), and by (1 - s) * s * (exp(2u) - 1) + ulp(s) for sigmoid (ds/dl = s(1-s));
// u = ulp(max |logit|) of the token (bf16 logits near 4 have ulp 2^-5: softmax probs move by 6%).
// A bias does not move (it is the same on both sides), so a selection value v = s + b moves by
// tol(s) too.
//
// A different chosen set is accepted when some scores within their tol would make the GPU's set
// the exact choice:
//   - its ids are distinct and in range, and lie in at most topk_group groups;
//   - groups: the GPU's groups plus the best (by reference group score) other groups whose
//     experts are all below the chosen ones (within tol) make topk_group kept groups, and no
//     dropped group beats a kept one by more than both groups' tol (a group's tol is the largest
//     tol of its experts, twice that for the sum of the top 2);
//   - experts: no unchosen expert of the kept groups beats a chosen one by more than tol(chosen)
//     + tol(unchosen).
// Without groups this is the rule "the k-th and (k+1)-th selection values are within tol".
// Weights are compared only when the sets agree: within tol of the scores carried through the
// renormalisation and the scaling, plus one ulp of the weight when those round again.
std::string check_routing(const MoeConfig& config, const Routing& ref,
                          std::span<const std::int32_t> ids, std::span<const float> weights);

}  // namespace rt_moe::test
