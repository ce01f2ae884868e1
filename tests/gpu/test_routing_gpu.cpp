// The routing variants of REFERENCE.md section 4 on the GPU: the model presets' own routing and a
// DeepSeek-V2-style routing, each checked against the CPU reference (routing with the near-tie
// rule of reference.h, outputs with the accuracy rule), plus properties the variants guarantee
// (kept groups, renormalised sums) checked on the GPU's decisions directly.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>

#include "forward_check.h"
#include "rt_moe/presets.h"

namespace rt_moe::test {
namespace {

// Every token's k experts lie in at most topk_group groups.
void check_groups(const MoeConfig& c, const ForwardRun& run, std::int64_t tokens) {
  const std::int64_t k = c.top_k, size = c.n_routed_experts / c.routing.n_group;
  std::int64_t bad = 0;
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::set<std::int64_t> groups;
    for (std::int64_t j = 0; j < k; ++j) groups.insert(run.ids[t * k + j] / size);
    bad += std::int64_t(groups.size()) > c.routing.topk_group;
  }
  INFO("tokens whose experts span more than topk_group = " << c.routing.topk_group << " groups");
  CHECK(bad == 0);
}

// With renormalisation, every token's weights sum to the scaling factor (k roundings apart).
void check_weight_sums(const MoeConfig& c, const ForwardRun& run, std::int64_t tokens) {
  const std::int64_t k = c.top_k;
  const float scale = c.routing.routed_scaling_factor;
  float worst = 0.0f;
  for (std::int64_t t = 0; t < tokens; ++t) {
    float sum = 0.0f;
    for (std::int64_t j = 0; j < k; ++j) sum += run.weights[t * k + j];
    worst = std::max(worst, std::abs(sum - scale));
  }
  INFO("largest |sum of a token's weights - " << scale << "|: " << worst);
  CHECK(worst <= 0.01f * scale);
}

// DeepSeek-V2's routing (softmax, 8 groups keep 3 by max, not renormalised, x16) on a small shape
// with H and I that are no multiple of any tile.
MoeConfig deepseek_v2_style(DType dtype) {
  MoeConfig c = make_config(1032, 200, 64, 2, 6, dtype);
  c.routing = deepseek_v2_routing();
  return c;
}

// Activations of `tokens` tokens that are all x = (1, 1, 0, ...): logit e is router[e][0] +
// router[e][1].
std::vector<std::uint16_t> ones_then_zeros(const MoeConfig& c, std::int64_t tokens) {
  const std::int64_t H = c.d_hidden;
  std::vector<std::uint16_t> x(tokens * H, float_to_bits(c.dtype, 0.0f));
  for (std::int64_t t = 0; t < tokens; ++t) x[t * H] = x[t * H + 1] = float_to_bits(c.dtype, 1.0f);
  return x;
}

}  // namespace

TEST_CASE(
    "routing: deepseek-v3 preset (sigmoid, correction bias, 8 groups keep 4 by top-2 sum, "
    "renormalised, x2.5) at T = 1, 64, 1000",
    "[forward][routing]") {
  const MoeConfig c = preset("deepseek-v3").moe;
  REQUIRE(c.routing.correction_bias);
  Fixture f(c, 811);
  for (std::int64_t tokens : {1, 64, 1000}) {
    CheckResult r = f.check(tokens, 820 + tokens, "deepseek-v3 routing");
    check_groups(c, r.run, tokens);
    check_weight_sums(c, r.run, tokens);
  }
  // A bias ~20x stronger than random_weights' moves many choices (and the groups): the GPU must
  // still agree with the reference, whose weights ignore the bias.
  for (float& b : f.weights.router_bias) b *= 20.0f;
  f.device_weights.router_bias.upload(f.weights.router_bias.data(),
                                      f.weights.router_bias.size() * sizeof(float));
  CheckResult strong = f.check(64, 884, "deepseek-v3 routing, strong bias");
  check_groups(c, strong.run, 64);
  check_weight_sums(c, strong.run, 64);
}

TEST_CASE(
    "routing: qwen3-30b-a3b preset (softmax over fp32 logits, renormalised) at T = 1, 100, "
    "1000",
    "[forward][routing]") {
  const MoeConfig c = preset("qwen3-30b-a3b").moe;
  REQUIRE(c.routing.logits_fp32);
  Fixture f(c, 911);
  // T = 1 and 100 run the CUDA-core router, T = 1000 the tensor-core one: both keep fp32 logits.
  for (std::int64_t tokens : {1, 100, 1000}) {
    CheckResult r = f.check(tokens, 920 + tokens, "qwen3-30b-a3b routing");
    check_weight_sums(c, r.run, tokens);
  }
}

TEST_CASE(
    "routing: mixtral-8x7b preset (softmax over fp32 logits, renormalised, k = 2 of 8) at "
    "T = 1, 100",
    "[forward][routing]") {
  const MoeConfig c = preset("mixtral-8x7b").moe;  // 2.8 GB of bf16 expert weights
  Fixture f(c, 1011);
  for (std::int64_t tokens : {1, 100}) {
    CheckResult r = f.check(tokens, 1020 + tokens, "mixtral-8x7b routing");
    check_weight_sums(c, r.run, tokens);
  }
}

TEST_CASE(
    "routing: deepseek-v2-style routing (softmax, 8 groups keep 3 by max, x16) on a small "
    "shape, bf16 and fp16, at T = 1, 17, 1000",
    "[forward][routing]") {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const MoeConfig c = deepseek_v2_style(dtype);
    Fixture f(c, 1111 + int(dtype));
    for (std::int64_t tokens : {1, 17, 1000}) {
      CheckResult r = f.check(tokens, 1120 + tokens, "deepseek-v2-style routing");
      check_groups(c, r.run, tokens);
    }
  }
}

TEST_CASE("routing: deepseek-v3-style routing on a small shape, fp16, at T = 1, 17, 1000",
          "[forward][routing]") {
  MoeConfig c = make_config(512, 136, 64, 1, 6, DType::kF16);
  c.routing = preset("deepseek-v3").moe.routing;  // groups of 8 experts here
  Fixture f(c, 1211);
  for (float& b : f.weights.router_bias) b *= 10.0f;
  f.device_weights.router_bias.upload(f.weights.router_bias.data(),
                                      f.weights.router_bias.size() * sizeof(float));
  for (std::int64_t tokens : {1, 17, 1000}) {
    CheckResult r = f.check(tokens, 1220 + tokens, "deepseek-v3-style routing fp16");
    check_groups(c, r.run, tokens);
    check_weight_sums(c, r.run, tokens);
  }
}

TEST_CASE("routing: fp32 logits choose where dtype-rounded logits tie, in both router kernels",
          "[forward][routing]") {
  // Every token is x = (1, 1, 0, ...); expert 0's logit is 8 and expert 1's 8 + 2^-6, which
  // rounds to 8 in bf16: rounded logits tie (expert 0 wins), fp32 logits choose expert 1.
  // T = 1 runs the CUDA-core router, T = 200 the tensor-core one.
  for (bool fp32 : {false, true}) {
    MoeConfig c = make_config(256, 64, 8, 0, 1, DType::kBF16);
    c.routing.logits_fp32 = fp32;
    Fixture f(c, 1311);
    std::fill(f.weights.router.begin(), f.weights.router.end(), float_to_bits(c.dtype, 0.0f));
    f.weights.router[0] = float_to_bits(c.dtype, 8.0f);
    f.weights.router[256] = float_to_bits(c.dtype, 8.0f);
    f.weights.router[257] = float_to_bits(c.dtype, 0x1p-6f);
    f.device_weights.router.upload(f.weights.router.data(), f.weights.router.size() * 2);
    for (std::int64_t tokens : {1, 200}) {
      const std::vector<std::uint16_t> x = ones_then_zeros(c, tokens);
      driver::DeviceBuffer x_dev = upload(x), out_dev(tokens * 256 * 2);
      CheckResult r = check_forward(f.moe, f.weights, x, x_dev, out_dev, tokens, f.stream.get(),
                                    fp32 ? "fp32 logits" : "rounded logits");
      INFO((fp32 ? "fp32" : "rounded") << " logits, T = " << tokens);
      CHECK(std::count(r.run.ids.begin(), r.run.ids.end(), fp32 ? 1 : 0) == tokens);
    }
  }
}

TEST_CASE("routing: fp32 logits choose where dtype-rounded logits tie, in the wgmma router",
          "[forward][routing]") {
  // E = 128 and k = 8 at T = 2048 run the wgmma gating GEMM (grouped_gemm_sm90.cuh kRouter) with
  // its K in one part, so the kernel rounds the logits itself, or keeps them fp32. Every token is
  // x = (1, 1, 0, ...); experts 0-6 get logit 16, expert 7 8 and expert 8 8 + 2^-6, which rounds
  // to 8 in bf16: the eighth choice is expert 7 with rounded logits (a tie, the lower index wins)
  // and expert 8 with fp32 logits.
  const std::int64_t tokens = 2048;
  for (bool fp32 : {false, true}) {
    MoeConfig c = make_config(256, 64, 128, 0, 8, DType::kBF16);
    c.routing.logits_fp32 = fp32;
    Fixture f(c, 1411);
    const std::string plan = f.moe.describe(tokens);
    INFO(plan);
    REQUIRE(plan.find("router mma sm90 128x128x64") != std::string::npos);
    std::fill(f.weights.router.begin(), f.weights.router.end(), float_to_bits(c.dtype, 0.0f));
    for (int e = 0; e < 7; ++e) f.weights.router[e * 256] = float_to_bits(c.dtype, 16.0f);
    f.weights.router[7 * 256] = float_to_bits(c.dtype, 8.0f);
    f.weights.router[8 * 256] = float_to_bits(c.dtype, 8.0f);
    f.weights.router[8 * 256 + 1] = float_to_bits(c.dtype, 0x1p-6f);
    f.device_weights.router.upload(f.weights.router.data(), f.weights.router.size() * 2);
    const std::vector<std::uint16_t> x = ones_then_zeros(c, tokens);
    driver::DeviceBuffer x_dev = upload(x), out_dev(tokens * 256 * 2);
    CheckResult r = check_forward(f.moe, f.weights, x, x_dev, out_dev, tokens, f.stream.get(),
                                  fp32 ? "wgmma router, fp32 logits" : "wgmma router, rounded");
    INFO((fp32 ? "fp32" : "rounded") << " logits");
    CHECK(std::count(r.run.ids.begin(), r.run.ids.end(), fp32 ? 8 : 7) == tokens);
    CHECK(std::count(r.run.ids.begin(), r.run.ids.end(), fp32 ? 7 : 8) == 0);
  }
}

TEST_CASE("routing: prepare() needs a 16-byte aligned router_bias when the config uses one",
          "[forward][routing]") {
  use_primary_context();
  MoeConfig c = make_config(256, 64, 8, 1, 2, DType::kBF16);
  c.routing.correction_bias = true;
  c.routing.score = RoutingConfig::Score::kSigmoid;
  HostWeights host = random_weights(c, 1);
  DeviceWeights dw = upload(host);
  MoeRuntime moe(c);
  MoeWeights w = dw.view();
  REQUIRE(w.router_bias != nullptr);
  CHECK_NOTHROW(moe.prepare(w));
  w.router_bias = nullptr;
  CHECK(code_of([&] { moe.prepare(w); }) == ErrorCode::kInvalidArgument);
  w.router_bias = dw.router_bias.as<const float>() + 1;  // 4-byte aligned only
  CHECK(code_of([&] { moe.prepare(w); }) == ErrorCode::kInvalidArgument);
  // Without the knob the bias is not needed.
  c.routing.correction_bias = false;
  MoeRuntime plain(c);
  w.router_bias = nullptr;
  CHECK_NOTHROW(plain.prepare(w));
}

}  // namespace rt_moe::test
