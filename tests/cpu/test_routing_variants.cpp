// The routing variants of REFERENCE.md section 4 in the CPU reference (reference_routing), each
// against values computed by hand; MoeConfig::validate() on the routing knobs; and check_routing's
// near-tie rule with groups and a correction bias (reference.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference.h"
#include "rt_moe/error.h"
#include "rt_moe/presets.h"
#include "tiny_routing.h"

namespace rt_moe::test {
namespace {

using Score = RoutingConfig::Score;
using GroupScore = RoutingConfig::GroupScore;

Routing route(const MoeConfig& c, const std::vector<float>& logits,
              const std::vector<float>& bias = {}) {
  return reference_routing(c, unit_x(c), router_for(c, logits), 1, bias);
}

float sigmoid_by_hand(DType dtype, double logit) {
  return round_to(dtype, static_cast<float>(1.0 / (1.0 + std::exp(-logit))));
}

std::string validate_error(const MoeConfig& c) {
  try {
    c.validate();
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("routing variants: sigmoid scores, top-k on them, weights are the scores") {
  for (const DType dt : kDTypes) {
    INFO(to_string(dt));
    MoeConfig c = tiny_config(4, 2, dt);
    c.routing.score = Score::kSigmoid;
    const Routing r = route(c, {1.0f, 2.0f, 0.5f, -1.0f});
    const double logits[] = {1.0, 2.0, 0.5, -1.0};
    for (int e = 0; e < 4; ++e)
      CHECK(within_one_ulp(dt, r.probs[e], sigmoid_by_hand(dt, logits[e])));
    REQUIRE(r.ids == std::vector<std::int32_t>{1, 0});
    CHECK(r.weights[0] == r.probs[1]);  // sigmoid(2) ~ 0.88, not a softmax prob
    CHECK(r.weights[1] == r.probs[0]);
    CHECK(r.weights[0] > 0.87f);
    CHECK(r.weights[0] + r.weights[1] > 1.5f);  // sigmoid scores do not sum to 1
    CHECK(r.selection == r.probs);              // no bias
  }
}

TEST_CASE("routing variants: the correction bias changes the selection, never the weights") {
  for (const Score score : {Score::kSigmoid, Score::kSoftmax}) {
    MoeConfig c = tiny_config(4, 2);
    c.routing.score = score;
    const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f};
    const Routing plain = route(c, logits);
    REQUIRE(plain.ids == std::vector<std::int32_t>{0, 1});

    c.routing.correction_bias = true;
    const std::vector<float> bias = {0.0f, 0.0f, 0.75f, 0.0f};  // lifts expert 2 to the top
    const Routing biased = route(c, logits, bias);
    REQUIRE(biased.ids == std::vector<std::int32_t>{2, 0});
    CHECK(biased.probs == plain.probs);  // scores are unbiased
    CHECK(biased.selection[2] == plain.probs[2] + 0.75f);
    CHECK(biased.weights[0] == plain.probs[2]);  // the unbiased score of expert 2
    CHECK(biased.weights[1] == plain.probs[0]);

    // A zero bias is the plain routing; a missing bias is an error.
    CHECK(route(c, logits, std::vector<float>(4, 0.0f)).ids == plain.ids);
    CHECK_THROWS_AS(route(c, logits), Error);
    CHECK_THROWS_AS(route(c, logits, std::vector<float>(3, 0.0f)), Error);
  }
  // Without the knob a given bias is ignored.
  const MoeConfig c = tiny_config(4, 2);
  CHECK(route(c, {2.0f, 1.0f, 0.5f, 0.0f}, {0.0f, 0.0f, 9.0f, 0.0f}).ids ==
        std::vector<std::int32_t>{0, 1});
}

TEST_CASE("routing variants: group-limited selection by group max excludes a top-k expert") {
  // DeepSeek-V2 style: softmax, 4 groups of 2, keep 2 by their max prob, scale 16.
  MoeConfig c = tiny_config(8, 3);
  c.routing.n_group = 4;
  c.routing.topk_group = 2;
  c.routing.group_score = GroupScore::kMax;
  c.routing.routed_scaling_factor = 16.0f;
  // Groups {0,1} {2,3} {4,5} {6,7}. Plain top-3: 0, 4, 2. Group maxima 3, 2.75, 2.875, 0: keep
  // groups 0 and 2, so expert 2 (third overall) is out and expert 1 (logit 0) is in.
  const std::vector<float> logits = {3.0f, 0.0f, 2.75f, 2.5f, 2.875f, -1.0f, 0.0f, 0.0f};
  MoeConfig plain_config = c;
  plain_config.routing.n_group = 1;
  plain_config.routing.topk_group = 1;
  REQUIRE(route(plain_config, logits).ids == std::vector<std::int32_t>{0, 4, 2});
  const Routing r = route(c, logits);
  REQUIRE(r.ids == std::vector<std::int32_t>{0, 4, 1});
  const std::vector<float> probs =
      softmax_by_hand(c.dtype, {3.0, 0.0, 2.75, 2.5, 2.875, -1.0, 0.0, 0.0});
  for (int j = 0; j < 3; ++j) {
    // Softmax over ALL experts (the groups only limit the choice), scaled, not renormalised.
    CHECK(r.weights[j] == round_to(c.dtype, r.probs[r.ids[j]] * 16.0f));
    CHECK(within_one_ulp(c.dtype, r.probs[r.ids[j]], probs[r.ids[j]]));
  }
  // Keeping 3 groups lets expert 2 back in.
  c.routing.topk_group = 3;
  CHECK(route(c, logits).ids == std::vector<std::int32_t>{0, 4, 2});
  // Group ties go to the lower group index: groups 1 and 2 tie at 2.75, group 1 is kept.
  c.routing.topk_group = 2;
  const Routing tie = route(c, {3.0f, 0.0f, 2.75f, 0.0f, 2.75f, 2.5f, 0.0f, 0.0f});
  CHECK(tie.ids == std::vector<std::int32_t>{0, 2, 1});
}

TEST_CASE("routing variants: group-limited selection by the sum of the top 2 scores") {
  // DeepSeek-V3 style group scores on sigmoid scores: groups {0,1} {2,3} {4,5} {6,7}; keep 2.
  MoeConfig c = tiny_config(8, 2);
  c.routing.score = Score::kSigmoid;
  c.routing.n_group = 4;
  c.routing.topk_group = 2;
  c.routing.group_score = GroupScore::kSumTop2;
  // Sigmoid scores ~ {0.953, 0.119, 0.924, 0.924, 0.940, 0.881, 0.5, 0.5}: top-2 sums 1.07,
  // 1.85, 1.82, 1.0 keep groups 1 and 2, which excludes expert 0, the best expert overall.
  const std::vector<float> logits = {3.0f, -2.0f, 2.5f, 2.5f, 2.75f, 2.0f, 0.0f, 0.0f};
  const Routing r = route(c, logits);
  REQUIRE(r.ids == std::vector<std::int32_t>{4, 2});  // 2 and 3 tie: the lower index
  CHECK(r.weights[0] == r.probs[4]);
  CHECK(r.weights[1] == r.probs[2]);
  // By the group max instead, group 0 (0.953) is kept and expert 0 chosen.
  c.routing.group_score = GroupScore::kMax;
  CHECK(route(c, logits).ids == std::vector<std::int32_t>{0, 4});
  // Without groups: plain top-2.
  c.routing.n_group = 1;
  c.routing.topk_group = 1;
  CHECK(route(c, logits).ids == std::vector<std::int32_t>{0, 4});
}

TEST_CASE("routing variants: group scores use the biased values (DeepSeek-V3 routing)") {
  // The full DeepSeek-V3 recipe on 8 experts: sigmoid, bias, 4 groups keep 2 by top-2 sums,
  // top-2, renormalise, x2.5.
  MoeConfig c = tiny_config(8, 2);
  c.routing = {.score = Score::kSigmoid,
               .correction_bias = true,
               .n_group = 4,
               .topk_group = 2,
               .group_score = GroupScore::kSumTop2,
               .renormalize = true,
               .routed_scaling_factor = 2.5f};
  const std::vector<float> logits = {3.0f, -2.0f, 2.5f, 2.5f, 2.75f, 2.0f, 0.0f, 0.0f};
  // Unbiased, groups 1 and 2 are kept (previous case). A bias of +1 on expert 1 makes group 0's
  // top-2 sum 0.953 + 1.119 = 2.07, the best: groups 0 and 1 are kept, and expert 1 (biased
  // 1.119) and expert 0 (0.953) are chosen; their weights come from the unbiased scores.
  const std::vector<float> bias = {0.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const Routing r = route(c, logits, bias);
  REQUIRE(r.ids == std::vector<std::int32_t>{1, 0});
  const float s1 = r.probs[1], s0 = r.probs[0];
  CHECK(within_one_ulp(c.dtype, s1, sigmoid_by_hand(c.dtype, -2.0)));
  const float sum = s1 + s0;
  CHECK(r.weights[0] == round_to(c.dtype, s1 / sum * 2.5f));
  CHECK(r.weights[1] == round_to(c.dtype, s0 / sum * 2.5f));
  CHECK(std::abs(r.weights[0] + r.weights[1] - 2.5f) < 0.02f);
  CHECK(r.weights[0] < 0.5f);  // expert 1's score is small: only its bias chose it
}

TEST_CASE("routing variants: renormalise divides the k weights by their sum") {
  for (const Score score : {Score::kSoftmax, Score::kSigmoid}) {
    MoeConfig c = tiny_config(4, 2, DType::kF16);
    c.routing.score = score;
    const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f};
    const Routing plain = route(c, logits);
    c.routing.renormalize = true;
    const Routing r = route(c, logits);
    REQUIRE(r.ids == plain.ids);
    const float sum = plain.weights[0] + plain.weights[1];  // the unrounded scores' fp32 sum
    for (int j = 0; j < 2; ++j) CHECK(r.weights[j] == round_to(c.dtype, plain.weights[j] / sum));
    CHECK(std::abs(r.weights[0] + r.weights[1] - 1.0f) < 1e-3f);
  }
}

TEST_CASE("routing variants: the routed scaling factor multiplies the weights") {
  for (const DType dt : kDTypes) {
    MoeConfig c = tiny_config(4, 3, dt);
    const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f};
    const Routing plain = route(c, logits);
    c.routing.routed_scaling_factor = 16.0f;
    const Routing r = route(c, logits);
    REQUIRE(r.ids == plain.ids);
    for (int j = 0; j < 3; ++j) CHECK(r.weights[j] == plain.weights[j] * 16.0f);  // exact: 2^4
    c.routing.routed_scaling_factor = 2.5f;
    const Routing r25 = route(c, logits);
    for (int j = 0; j < 3; ++j) CHECK(r25.weights[j] == round_to(dt, plain.weights[j] * 2.5f));
  }
}

TEST_CASE("routing variants: fp32 logits decide where dtype-rounded logits tie") {
  // x = (1, 1, 0, ...): expert 0's logit is 8, expert 1's is 8 + d with d below half an ulp of 8
  // (bf16: 2^-4, fp16: 2^-7), so rounded to the dtype both are 8 and the tie goes to expert 0;
  // in fp32, expert 1 is ahead by exp(d) - 1 of its prob, several ulps.
  for (const DType dt : kDTypes) {
    INFO(to_string(dt));
    MoeConfig c = tiny_config(4, 1, dt);
    const float d = dt == DType::kBF16 ? 0x1p-6f : 0x1p-9f;
    std::vector<float> router(4 * c.d_hidden, 0.0f);
    router[0] = 8.0f;
    router[c.d_hidden] = 8.0f;
    router[c.d_hidden + 1] = d;
    std::vector<float> x(c.d_hidden, 0.0f);
    x[0] = x[1] = 1.0f;
    const auto router_bits = to_bits(dt, router), x_bits = to_bits(dt, x);
    REQUIRE(round_to(dt, 8.0f + d) == 8.0f);

    const Routing rounded = reference_routing(c, x_bits, router_bits, 1);
    CHECK(rounded.ids == std::vector<std::int32_t>{0});
    CHECK(rounded.probs[0] == rounded.probs[1]);
    c.routing.logits_fp32 = true;
    const Routing fp32 = reference_routing(c, x_bits, router_bits, 1);
    CHECK(fp32.ids == std::vector<std::int32_t>{1});
    CHECK(fp32.probs[1] > fp32.probs[0]);
    CHECK(fp32.max_abs_logit[0] == 8.0f + d);
    CHECK(rounded.max_abs_logit[0] == 8.0f);
  }
}

TEST_CASE("routing variants: validate() rejects bad routing knobs and names the value") {
  const MoeConfig good = tiny_config(8, 2);
  CHECK(validate_error(good).empty());
  auto with = [&](auto change) {
    MoeConfig c = good;
    change(c.routing);
    return validate_error(c);
  };
  CHECK(contains(with([](RoutingConfig& r) { r.n_group = 3; }), "routing.n_group = 3"));
  CHECK(contains(with([](RoutingConfig& r) { r.n_group = 3; }), "divide n_routed_experts = 8"));
  CHECK(contains(with([](RoutingConfig& r) { r.n_group = 0; }), "routing.n_group = 0"));
  CHECK(contains(with([](RoutingConfig& r) { r.n_group = -8; }), "routing.n_group = -8"));
  CHECK(contains(with([](RoutingConfig& r) { r.topk_group = 2; }), "routing.topk_group = 2"));
  CHECK(contains(with([](RoutingConfig& r) {
                   r.n_group = 4;
                   r.topk_group = 0;
                 }),
                 "routing.topk_group = 0 must be in [1, n_group = 4]"));
  CHECK(contains(with([](RoutingConfig& r) {
                   r.n_group = 4;
                   r.topk_group = 5;
                 }),
                 "routing.topk_group = 5"));
  // k = 2 experts do not fit in 1 kept group of 1 expert.
  CHECK(contains(with([](RoutingConfig& r) { r.n_group = 8; }), "top_k = 2 exceeds the 1 experts"));
  CHECK(contains(with([](RoutingConfig& r) {
                   r.n_group = 8;
                   r.topk_group = 2;
                   r.group_score = RoutingConfig::GroupScore::kSumTop2;
                 }),
                 "groups of 1"));
  CHECK(contains(with([](RoutingConfig& r) { r.score = static_cast<Score>(7); }),
                 "routing.score = 7"));
  CHECK(contains(with([](RoutingConfig& r) { r.group_score = static_cast<GroupScore>(-1); }),
                 "routing.group_score = -1"));
  // 32 groups is the most; valid group configs pass.
  MoeConfig wide = tiny_config(64, 2);
  wide.routing.n_group = 64;
  wide.routing.topk_group = 2;
  CHECK(contains(validate_error(wide), "routing.n_group = 64 must be in [1, 32]"));
  wide.routing.n_group = 32;
  CHECK(validate_error(wide).empty());
  wide.routing.group_score = RoutingConfig::GroupScore::kSumTop2;
  CHECK(validate_error(wide).empty());
  // group_score does not matter without groups.
  MoeConfig one = tiny_config(1, 1);
  one.routing.group_score = RoutingConfig::GroupScore::kSumTop2;
  CHECK(validate_error(one).empty());
}

TEST_CASE("routing variants: RoutingConfig::describe names every knob in use") {
  CHECK(RoutingConfig{}.describe() == "softmax top-k");
  const RoutingConfig v3{.score = Score::kSigmoid,
                         .correction_bias = true,
                         .n_group = 8,
                         .topk_group = 4,
                         .group_score = GroupScore::kSumTop2,
                         .renormalize = true,
                         .routed_scaling_factor = 2.5f};
  CHECK(v3.describe() == "sigmoid+bias groups 4/8 (sum-top2) top-k renorm x2.5");
  const RoutingConfig qwen{.renormalize = true, .logits_fp32 = true};
  CHECK(qwen.describe() == "softmax top-k renorm fp32-logits");
}

TEST_CASE("routing variants: check_routing judges group near-ties on group scores") {
  // 4 groups of 2, keep 2 by max, k = 3. Reference keeps groups 0 and 1; group 2 is one bf16
  // ulp below group 1, so keeping group 2 instead is a near-tie.
  const DType dt = DType::kBF16;
  MoeConfig c = tiny_config(8, 3, dt);
  c.routing.n_group = 4;
  c.routing.topk_group = 2;
  const float quarter = 0.25f;
  const float below = bits_to_float(dt, float_to_bits(dt, quarter) - 1);
  Routing ref;
  ref.tokens = 1;
  ref.top_k = 3;
  ref.probs = {0.5f, 0.0078125f, quarter, 0.0f, below, 0.125f, 0.0f, 0.0f};
  ref.ids = {0, 2, 1};
  ref.weights = {0.5f, quarter, 0.0078125f};
  CHECK(check_routing(c, ref, ref.ids, ref.weights) == "");
  // Groups 0 and 2: the near-tie.
  CHECK(check_routing(c, ref, std::vector<std::int32_t>{0, 4, 5},
                      std::vector<float>{0.5f, below, 0.125f}) == "");
  // Three groups.
  const std::string three = check_routing(c, ref, std::vector<std::int32_t>{0, 2, 5},
                                          std::vector<float>{0.5f, quarter, 0.125f});
  INFO(three);
  CHECK(contains(three, "more than topk_group = 2 groups"));
  // Groups 0 and 2, but not the best experts of group 2: expert 5 is left out for expert 1.
  const std::string inside = check_routing(c, ref, std::vector<std::int32_t>{0, 4, 1},
                                           std::vector<float>{0.5f, below, 0.0078125f});
  INFO(inside);
  CHECK(contains(inside, "expert 5"));
  // Group 3 (max 0) for group 1 (max 0.25) is no near-tie.
  const std::string far = check_routing(c, ref, std::vector<std::int32_t>{0, 1, 6},
                                        std::vector<float>{0.5f, 0.0078125f, 0.0f});
  INFO(far);
  CHECK(contains(far, "dropped group 1"));
  // Groups by the sum of the top 2: group 1 sums 0.25, group 2 sums 0.373: now group 2 is far
  // ahead and the reference's own choice of group 1 is the wrong one.
  c.routing.group_score = RoutingConfig::GroupScore::kSumTop2;
  CHECK(check_routing(c, ref, ref.ids, ref.weights) == "");  // same sets: only weights compared
  CHECK(check_routing(c, ref, std::vector<std::int32_t>{0, 4, 5},
                      std::vector<float>{0.5f, below, 0.125f}) == "");
}

TEST_CASE("routing variants: check_routing judges near-ties on the biased selection values") {
  const DType dt = DType::kBF16;
  MoeConfig c = tiny_config(4, 1, dt);
  c.routing.correction_bias = true;
  Routing ref;
  ref.tokens = 1;
  ref.top_k = 1;
  ref.probs = {0.5f, 0.25f, 0.125f, 0.125f};
  // Bias 0.2498 on expert 1: its selection value is a hair below expert 0's.
  ref.selection = {0.5f, 0.25f + 0.2498f, 0.125f, 0.125f};
  ref.ids = {0};
  ref.weights = {0.5f};
  CHECK(check_routing(c, ref, std::vector<std::int32_t>{1}, std::vector<float>{0.25f}) == "");
  CHECK(check_routing(c, ref, std::vector<std::int32_t>{2}, std::vector<float>{0.125f}) != "");
  // Without the selection values (probs alone) expert 1 is far behind.
  ref.selection.clear();
  CHECK(check_routing(c, ref, std::vector<std::int32_t>{1}, std::vector<float>{0.25f}) != "");
}

TEST_CASE(
    "routing variants: check_routing passes the reference's own routing and catches weights "
    "from biased scores, unscaled or unnormalised weights") {
  // A DeepSeek-V3-style routing on random weights with a strong bias, so that the biased and the
  // unbiased scores differ by far more than the tolerance.
  MoeConfig c{.d_hidden = 64,
              .d_expert = 8,
              .n_routed_experts = 64,
              .n_shared_experts = 0,
              .top_k = 6,
              .dtype = DType::kBF16};
  c.routing = {.score = Score::kSigmoid,
               .correction_bias = true,
               .n_group = 8,
               .topk_group = 4,
               .group_score = GroupScore::kSumTop2,
               .renormalize = true,
               .routed_scaling_factor = 2.5f};
  const std::int64_t tokens = 50;
  HostWeights w = random_weights(c, 5);
  REQUIRE(w.router_bias.size() == 64);
  for (float& b : w.router_bias) b *= 20.0f;  // ~N(0, 0.2)
  const auto x = random_activations(c, tokens, 6);
  const Routing r = reference_routing(c, x, w.router, tokens, w.router_bias);
  CHECK(check_routing(c, r, r.ids, r.weights) == "");

  // Every token's experts lie in at most 4 groups of 8.
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::vector<int> groups;
    for (int j = 0; j < 6; ++j) groups.push_back(r.ids[t * 6 + j] / 8);
    std::sort(groups.begin(), groups.end());
    CHECK(std::unique(groups.begin(), groups.end()) - groups.begin() <= 4);
  }
  auto weights_from = [&](bool biased, bool renormalize, float scale) {
    std::vector<float> out(r.weights.size());
    for (std::int64_t t = 0; t < tokens; ++t) {
      float sum = 0.0f;
      for (int j = 0; j < 6; ++j) {
        const std::int32_t id = r.ids[t * 6 + j];
        sum += biased ? r.selection[t * 64 + id] : r.probs[t * 64 + id];
      }
      for (int j = 0; j < 6; ++j) {
        const std::int32_t id = r.ids[t * 6 + j];
        float v = biased ? r.selection[t * 64 + id] : r.probs[t * 64 + id];
        if (renormalize) v /= sum;
        out[t * 6 + j] = round_to(c.dtype, v * scale);
      }
    }
    return out;
  };
  CHECK(weights_from(false, true, 2.5f) == r.weights);
  CHECK(check_routing(c, r, r.ids, weights_from(true, true, 2.5f)) != "");
  CHECK(check_routing(c, r, r.ids, weights_from(false, true, 1.0f)) != "");
  CHECK(check_routing(c, r, r.ids, weights_from(false, false, 2.5f)) != "");

  // Plain top-6 by the biased values ignores the groups: some token must differ, and fail.
  MoeConfig flat = c;
  flat.routing.n_group = 1;
  flat.routing.topk_group = 1;
  const Routing f = reference_routing(flat, x, w.router, tokens, w.router_bias);
  CHECK(f.ids != r.ids);
  CHECK(check_routing(c, r, f.ids, f.weights) != "");
}

TEST_CASE("balanced routing inputs route every expert T k / E tokens (DeepSeek-V3, gpumode)") {
  // The benchmark's --balanced-routing (balance_router, balance_activations): token t to experts
  // (t k + j) mod E with equal weights, through each preset's own routing (DeepSeek-V3: sigmoid,
  // correction bias, 8 groups keep 4, renormalised, x2.5; gpumode: softmax top-4).
  for (const char* name : {"deepseek-v3", "gpumode-moe"}) {
    const MoeConfig c = preset(name).moe;
    const std::int64_t E = c.n_routed_experts, k = c.top_k, tokens = 2 * E / k + 3;
    HostWeights w;
    w.router.assign(std::size_t(E * c.d_hidden), 0);
    w.router_bias.assign(std::size_t(E), 0.f);
    for (std::int64_t e = 0; e < E; ++e) w.router_bias[std::size_t(e)] = 0.01f * float(e % 7 - 3);
    balance_router(c, w);
    std::vector<std::uint16_t> x = random_activations(c, tokens, 5);
    balance_activations(c, x, tokens);
    const Routing r = reference_routing(c, x, w.router, tokens, w.router_bias);
    std::vector<int> counts(std::size_t(E), 0);
    for (std::int64_t t = 0; t < tokens; ++t) {
      std::vector<std::int32_t> want, got(r.ids.begin() + t * k, r.ids.begin() + (t + 1) * k);
      for (std::int64_t j = 0; j < k; ++j) want.push_back(std::int32_t((t * k + j) % E));
      std::sort(want.begin(), want.end());
      std::sort(got.begin(), got.end());
      INFO(name << ", token " << t);
      CHECK(got == want);
      for (std::int64_t j = 0; j < k; ++j) {
        CHECK(r.weights[std::size_t(t * k + j)] == r.weights[std::size_t(t * k)]);  // equal
        ++counts[std::size_t(got[std::size_t(j)])];
      }
    }
    // 2 E / k + 3 tokens: every expert twice, the first 3 k once more.
    for (std::int64_t e = 0; e < E; ++e) CHECK(counts[std::size_t(e)] == (e < 3 * k ? 3 : 2));
  }
  // H < E cannot give each expert its own element of x.
  MoeConfig narrow = make_config(64, 64, 128, 0, 2, DType::kBF16);
  HostWeights w;
  w.router.assign(128 * 64, 0);
  CHECK_THROWS_AS(balance_router(narrow, w), std::invalid_argument);
}

}  // namespace rt_moe::test
