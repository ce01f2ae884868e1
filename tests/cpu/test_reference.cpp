// The CPU reference itself (tests/support/reference.h): dtype conversion, random data, routing,
// the forward against an independent fp64 computation, and the accuracy and routing checks.
#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "reference.h"
#include "rt_moe/error.h"
#include "tiny_routing.h"

namespace rt_moe::test {
namespace {

// Decodes dtype bits with ldexp, independently of the bit tricks under test (NaN for NaNs).
double decode(DType dtype, std::uint16_t bits) {
  const int mant_bits = dtype == DType::kF16 ? 10 : 7;
  const int exp_max = dtype == DType::kF16 ? 31 : 255;
  const int bias = dtype == DType::kF16 ? 15 : 127;
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  const int exponent = (bits & 0x7fff) >> mant_bits;
  const int mant = bits & ((1 << mant_bits) - 1);
  if (exponent == exp_max) return mant ? std::nan("") : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mant, 1 - bias - mant_bits);
  return sign * std::ldexp(mant + (1 << mant_bits), exponent - bias - mant_bits);
}

// The MoE forward in fp64 straight from REFERENCE.md section 1: the shared expert is ONE dense
// expert of width S * I (no chunks), no intermediate rounding. `scale` receives, per output, the
// sum of |weight * h[r] * down[n][r]| over all slots and r, which bounds what the reference's
// roundings of h, y and out can each move the result by (one dtype ulp of its terms).
std::vector<double> naive_forward(const MoeConfig& c, const HostWeights& w,
                                  const std::vector<std::uint16_t>& x, std::int64_t tokens,
                                  const Routing& routing, std::vector<double>& scale) {
  const std::int64_t h = c.d_hidden, i = c.d_expert, k = c.top_k, si = c.n_shared_experts * i;
  auto f = [&](std::uint16_t b) { return static_cast<double>(bits_to_float(c.dtype, b)); };
  std::vector<double> out(tokens * h, 0.0);
  scale.assign(tokens * h, 0.0);
  // One expert of `width` with row-major gate/up [width, H] and down [H, width].
  auto apply = [&](std::int64_t t, const std::uint16_t* gate, const std::uint16_t* up,
                   const std::uint16_t* down, std::int64_t width, double weight) {
    std::vector<double> hidden(width);
    for (std::int64_t r = 0; r < width; ++r) {
      double g = 0, u = 0;
      for (std::int64_t n = 0; n < h; ++n) {
        g += f(x[t * h + n]) * f(gate[r * h + n]);
        u += f(x[t * h + n]) * f(up[r * h + n]);
      }
      hidden[r] = g / (1 + std::exp(-g)) * u;
    }
    for (std::int64_t n = 0; n < h; ++n) {
      double y = 0, magnitude = 0;
      for (std::int64_t r = 0; r < width; ++r) {
        y += hidden[r] * f(down[n * width + r]);
        magnitude += std::abs(hidden[r] * f(down[n * width + r]));
      }
      out[t * h + n] += weight * y;
      scale[t * h + n] += std::abs(weight) * magnitude;
    }
  };
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int64_t e = routing.ids[t * k + j];
      apply(t, &w.gate[e * i * h], &w.up[e * i * h], &w.down[e * h * i], i,
            routing.weights[t * k + j]);
    }
    if (si > 0) apply(t, w.shared_gate.data(), w.shared_up.data(), w.shared_down.data(), si, 1.0);
  }
  return out;
}

}  // namespace

TEST_CASE("reference: every fp16 and bf16 bit pattern round-trips and decodes exactly") {
  for (const DType dt : kDTypes) {
    int round_trip_failures = 0, decode_failures = 0;
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const auto bits = static_cast<std::uint16_t>(b);
      const float value = bits_to_float(dt, bits);
      const double want = decode(dt, bits);
      if (std::isnan(want) ? !std::isnan(value)
                           : value != want || std::signbit(value) != std::signbit(want)) {
        ++decode_failures;
      }
      const std::uint16_t back = float_to_bits(dt, value);
      if (std::isnan(value) ? !std::isnan(decode(dt, back)) : back != bits) ++round_trip_failures;
    }
    INFO(to_string(dt));
    REQUIRE(decode_failures == 0);
    REQUIRE(round_trip_failures == 0);
  }
}

TEST_CASE("reference: float_to_bits rounds to nearest even between every pair of neighbours") {
  // For each pair of adjacent positive finite values a < b: the midpoint goes to the even one, one
  // fp32 ulp off the midpoint goes to the nearer one. Exhaustive over both dtypes.
  for (const DType dt : kDTypes) {
    const std::uint16_t max_finite = dt == DType::kF16 ? 0x7bff : 0x7f7f;
    int failures = 0;
    for (std::uint16_t a = 0; a < max_finite; ++a) {
      const auto b = static_cast<std::uint16_t>(a + 1);
      const float mid = static_cast<float>((decode(dt, a) + decode(dt, b)) / 2);  // exact
      const std::uint16_t even = (a % 2 == 0) ? a : b;
      failures += float_to_bits(dt, mid) != even;
      failures += float_to_bits(dt, std::nextafter(mid, 0.0f)) != a;
      failures += float_to_bits(dt, std::nextafter(mid, INFINITY)) != b;
      failures += float_to_bits(dt, -mid) != (even | 0x8000);
    }
    INFO(to_string(dt));
    REQUIRE(failures == 0);
  }
}

TEST_CASE("reference: known conversion values, overflow and NaN") {
  using D = DType;
  CHECK(float_to_bits(D::kF16, 1.0f) == 0x3c00);
  CHECK(float_to_bits(D::kBF16, 1.0f) == 0x3f80);
  CHECK(float_to_bits(D::kF16, -2.0f) == 0xc000);
  CHECK(float_to_bits(D::kF16, -0.0f) == 0x8000);
  CHECK(float_to_bits(D::kBF16, -0.0f) == 0x8000);
  CHECK(float_to_bits(D::kF16, 65504.0f) == 0x7bff);  // largest half
  CHECK(float_to_bits(D::kF16, 65519.996f) == 0x7bff);
  CHECK(float_to_bits(D::kF16, 65520.0f) == 0x7c00);  // the tie above the largest goes to Inf
  CHECK(float_to_bits(D::kF16, -1e10f) == 0xfc00);
  CHECK(float_to_bits(D::kF16, 0x1p-24f) == 0x0001);      // smallest subnormal half
  CHECK(float_to_bits(D::kF16, 0x1p-25f) == 0x0000);      // tie to even: 0
  CHECK(float_to_bits(D::kF16, 0x1.8p-24f) == 0x0002);    // tie to even: 2
  CHECK(float_to_bits(D::kF16, 0x1.ffcp-15f) == 0x0400);  // tie: up into the normals
  CHECK(bits_to_float(D::kF16, 0x0001) == 0x1p-24f);
  CHECK(bits_to_float(D::kF16, 0x7bff) == 65504.0f);
  CHECK(float_to_bits(D::kF16, 1.0f + 0x1p-11f) == 0x3c00);    // tie to even
  CHECK(float_to_bits(D::kF16, 1.0f + 0x1.8p-10f) == 0x3c02);  // tie to even
  CHECK(float_to_bits(D::kBF16, 1.00390625f) == 0x3f80);       // 1 + 2^-8: tie to even
  CHECK(float_to_bits(D::kBF16, 1.01171875f) == 0x3f82);       // 1 + 3 * 2^-8: tie to even
  CHECK(float_to_bits(D::kBF16, std::numeric_limits<float>::max()) == 0x7f80);  // overflow
  CHECK(float_to_bits(D::kBF16, -INFINITY) == 0xff80);
  CHECK(float_to_bits(D::kF16, INFINITY) == 0x7c00);
  for (const DType dt : kDTypes) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    CHECK(std::isnan(bits_to_float(dt, float_to_bits(dt, nan))));
    CHECK(std::isnan(bits_to_float(dt, float_to_bits(dt, -nan))));
    const float signaling = std::bit_cast<float>(0x7f800001u);  // payload only in the low bits
    CHECK(std::isnan(bits_to_float(dt, float_to_bits(dt, signaling))));
    CHECK(round_to(dt, 0.3f) == bits_to_float(dt, float_to_bits(dt, 0.3f)));
  }
}

TEST_CASE("reference: fill_random is normal with the given scale and deterministic per seed") {
  for (const DType dt : kDTypes) {
    INFO(to_string(dt));
    const float scale = 0.5f;
    std::vector<std::uint16_t> a(1'000'001), b(a.size()), c(a.size());
    fill_random(a, dt, scale, 42);
    fill_random(b, dt, scale, 42);
    fill_random(c, dt, scale, 43);
    REQUIRE(a == b);
    std::int64_t same = 0;
    for (std::size_t j = 0; j < a.size(); ++j) same += a[j] == c[j];
    CHECK(same < static_cast<std::int64_t>(a.size()) / 50);

    double sum = 0, sum_sq = 0;
    std::int64_t non_finite = 0, within_1 = 0, beyond_2 = 0;
    for (const std::uint16_t bits : a) {
      const double v = bits_to_float(dt, bits) / scale;
      non_finite += !std::isfinite(v);
      sum += v;
      sum_sq += v * v;
      within_1 += std::abs(v) < 1;
      beyond_2 += std::abs(v) > 2;
    }
    const auto n = static_cast<double>(a.size());
    REQUIRE(non_finite == 0);
    CHECK(std::abs(sum / n) < 0.01);  // standard error 0.001
    CHECK(std::abs(std::sqrt(sum_sq / n) - 1) < 0.01);
    CHECK(std::abs(within_1 / n - 0.6827) < 0.005);  // the shape, not just the moments
    CHECK(std::abs(beyond_2 / n - 0.0455) < 0.003);

    // Counter-based: element j does not depend on the length (odd lengths and the tail path).
    for (const std::size_t len : {1, 2, 15, 17, 33}) {
      std::vector<std::uint16_t> prefix(len);
      fill_random(prefix, dt, scale, 42);
      CHECK(std::equal(prefix.begin(), prefix.end(), a.begin()));
    }
  }
}

TEST_CASE("reference: routing by hand on a tiny config") {
  for (const DType dt : kDTypes) {
    INFO(to_string(dt));
    const MoeConfig c = tiny_config(4, 2, dt);
    const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f};
    const Routing r = reference_routing(c, unit_x(c), router_for(c, logits), 1);
    const std::vector<float> probs = softmax_by_hand(dt, {1.0, 2.0, 0.5, -1.0});
    for (int e = 0; e < 4; ++e) CHECK(within_one_ulp(dt, r.probs[e], probs[e]));
    REQUIRE(r.ids == std::vector<std::int32_t>{1, 0});
    CHECK(r.weights[0] == r.probs[1]);  // not renormalised, not scaled
    CHECK(r.weights[1] == r.probs[0]);
    CHECK(r.tokens == 1);
    CHECK(r.top_k == 2);
    CHECK(r.max_abs_logit == std::vector<float>{2.0f});

    // Two tokens: each row of x is routed on its own.
    std::vector<std::uint16_t> x2 = unit_x(c);
    std::vector<float> second(c.d_hidden, 0.0f);
    second[0] = -1.0f;  // logits negated: order reversed
    const auto second_bits = to_bits(dt, second);
    x2.insert(x2.end(), second_bits.begin(), second_bits.end());
    const Routing r2 = reference_routing(c, x2, router_for(c, logits), 2);
    CHECK(r2.ids == std::vector<std::int32_t>{1, 0, 3, 2});
  }
}

TEST_CASE("reference: routing ties go to the lower expert index and k == E selects all in order") {
  const std::vector<float> x_logits = {1.0f, 2.0f, 2.0f, 0.0f};
  {
    const MoeConfig c = tiny_config(4, 1);
    REQUIRE(reference_routing(c, unit_x(c), router_for(c, x_logits), 1).ids ==
            std::vector<std::int32_t>{1});
  }
  {
    const MoeConfig c = tiny_config(4, 2);
    const Routing r = reference_routing(c, unit_x(c), router_for(c, x_logits), 1);
    REQUIRE(r.ids == std::vector<std::int32_t>{1, 2});
    CHECK(r.weights[0] == r.weights[1]);
  }
  {
    const MoeConfig c = tiny_config(4, 3);  // the tie at the boundary: 1 and 3 both have 1.0
    const std::vector<float> boundary = {2.0f, 1.0f, 3.0f, 1.0f};
    REQUIRE(reference_routing(c, unit_x(c), router_for(c, boundary), 1).ids ==
            std::vector<std::int32_t>{2, 0, 1});
  }
  {
    const MoeConfig c = tiny_config(4, 4);
    const std::vector<float> all = {-1.0f, 0.5f, 2.0f, 0.25f};
    const Routing r = reference_routing(c, unit_x(c), router_for(c, all), 1);
    REQUIRE(r.ids == std::vector<std::int32_t>{2, 1, 3, 0});
    const std::vector<float> probs = softmax_by_hand(c.dtype, {-1.0, 0.5, 2.0, 0.25});
    for (int j = 0; j < 4; ++j) CHECK(within_one_ulp(c.dtype, r.weights[j], probs[r.ids[j]]));
  }
}

TEST_CASE("reference: routing knobs renormalise and scale") {
  MoeConfig c = tiny_config(4, 2, DType::kF16);
  const auto router = router_for(c, {1.0f, 2.0f, 0.5f, -1.0f});
  const Routing plain = reference_routing(c, unit_x(c), router, 1);
  c.routing.renormalize = true;
  c.routing.routed_scaling_factor = 2.5f;
  const Routing knobs = reference_routing(c, unit_x(c), router, 1);
  REQUIRE(knobs.ids == plain.ids);
  const float sum = plain.weights[0] + plain.weights[1];
  for (int j = 0; j < 2; ++j) {
    CHECK(knobs.weights[j] == round_to(c.dtype, plain.weights[j] / sum * 2.5f));
  }
  CHECK(std::abs(knobs.weights[0] + knobs.weights[1] - 2.5f) < 2e-3f);
}

TEST_CASE("reference: forward matches a naive fp64 forward for S in 0 1 2 and both dtypes") {
  for (const DType dt : kDTypes) {
    for (const std::int64_t s : {0, 1, 2}) {
      const MoeConfig c{.d_hidden = 16,
                        .d_expert = 8,
                        .n_routed_experts = 4,
                        .n_shared_experts = s,
                        .top_k = 2,
                        .dtype = dt};
      INFO(c.describe());
      const std::int64_t tokens = 5;
      const HostWeights w = random_weights(c, 7 + s);
      const auto x = random_activations(c, tokens, 11 + s);
      const Routing r = reference_routing(c, x, w.router, tokens);
      const std::vector<float> out = reference_forward(c, w, x, tokens, r.ids, r.weights);
      std::vector<double> scale;
      const std::vector<double> want = naive_forward(c, w, x, tokens, r, scale);
      REQUIRE(out.size() == want.size());
      double diff_sq = 0, want_sq = 0;
      for (std::size_t j = 0; j < out.size(); ++j) {
        INFO("token " << j / c.d_hidden << " col " << j % c.d_hidden << ": " << out[j] << " vs "
                      << want[j]);
        // Three dtype roundings on the way (h, y, out), each relative to its own terms.
        REQUIRE(std::abs(out[j] - want[j]) <= 1e-2 * scale[j] + 1e-6);
        diff_sq += (out[j] - want[j]) * (out[j] - want[j]);
        want_sq += want[j] * want[j];
      }
      CHECK(std::sqrt(diff_sq / want_sq) < 1e-2);
    }
  }
}

TEST_CASE("reference: forward on a token subset is bitwise the same rows of the full forward") {
  const MoeConfig c{.d_hidden = 136,
                    .d_expert = 40,
                    .n_routed_experts = 5,
                    .n_shared_experts = 1,
                    .top_k = 3,
                    .dtype = DType::kBF16};
  const std::int64_t tokens = 37;  // experts serve odd numbers of tokens: every blocking path
  const HostWeights w = random_weights(c, 3);
  const auto x = random_activations(c, tokens, 4);
  const Routing r = reference_routing(c, x, w.router, tokens);
  const std::vector<float> all = reference_forward(c, w, x, tokens, r.ids, r.weights);
  const std::vector<std::int64_t> subset = {36, 0, 17};
  const std::vector<float> some = reference_forward(c, w, x, tokens, r.ids, r.weights, subset);
  REQUIRE(some.size() == subset.size() * c.d_hidden);
  for (std::size_t s = 0; s < subset.size(); ++s) {
    for (std::int64_t n = 0; n < c.d_hidden; ++n) {
      INFO("subset row " << s << " col " << n);
      REQUIRE(std::bit_cast<std::uint32_t>(some[s * c.d_hidden + n]) ==
              std::bit_cast<std::uint32_t>(all[subset[s] * c.d_hidden + n]));
    }
  }
  const std::vector<std::int32_t> bad_ids(r.ids.size(), 5);
  CHECK_THROWS_AS(reference_forward(c, w, x, tokens, bad_ids, r.weights), Error);
}

TEST_CASE("reference: compare catches a bad element and NaN and Inf and passes identical data") {
  const DType dt = DType::kBF16;
  const std::vector<float> ref = {1.0f, -2.0f, 0.5f, 3.0f, 0.0f, 4.0f};  // 2 rows of 3
  const auto same = to_bits(dt, ref);

  const Comparison ok = compare(dt, same, ref, 3);
  CHECK(ok.pass);
  CHECK(ok.bad == 0);
  CHECK(ok.checked == 6);
  CHECK(ok.rel_l2 == 0);
  CHECK(ok.describe().rfind("PASS", 0) == 0);

  auto one_bad = same;
  one_bad[5] = float_to_bits(dt, 4.5f);  // row 1, col 2
  const Comparison bad = compare(dt, one_bad, ref, 3);
  CHECK_FALSE(bad.pass);
  CHECK(bad.bad == 1);
  CHECK(bad.first_bad_row == 1);
  CHECK(bad.first_bad_col == 2);
  CHECK(bad.first_bad_out == 4.5f);
  CHECK(bad.first_bad_ref == 4.0f);
  CHECK(bad.max_abs_err == Approx(0.5));
  // ||ref|| = sqrt(1 + 4 + 0.25 + 9 + 0 + 16) = sqrt(30.25) = 5.5; ||out - ref|| = 0.5.
  CHECK(bad.rel_l2 == Approx(0.5 / 5.5));
  INFO(bad.describe());
  CHECK(bad.describe().find("FAIL 1/6") != std::string::npos);
  CHECK(bad.describe().find("(row 1, col 2)") != std::string::npos);

  // Within atol + rtol * |ref| passes: 4 + 0.03 rounds to 4.03125 in bf16, 0.03125 <= 0.05.
  auto close = same;
  close[5] = float_to_bits(dt, 4.03f);
  CHECK(compare(dt, close, ref, 3).pass);
  CHECK_FALSE(compare(dt, close, ref, 3, 0.0, 1e-3).pass);

  for (const float poison : {NAN, INFINITY, -INFINITY}) {
    auto poisoned = same;
    poisoned[4] = float_to_bits(dt, poison);  // where ref is 0
    const Comparison p = compare(dt, poisoned, ref, 3);
    INFO(p.describe());
    CHECK_FALSE(p.pass);
    CHECK(p.first_bad_col == 1);
    CHECK_FALSE(std::isfinite(p.rel_l2));
  }

  // A non-finite reference needs the same kind in out.
  const std::vector<float> special_ref = {NAN, INFINITY, -INFINITY};
  CHECK(compare(dt, to_bits(dt, special_ref), special_ref, 3).pass);
  CHECK_FALSE(compare(dt, to_bits(dt, {NAN, -INFINITY, -INFINITY}), special_ref, 3).pass);
  CHECK_FALSE(compare(dt, to_bits(dt, {1.0f, INFINITY, -INFINITY}), special_ref, 3).pass);
}

TEST_CASE("reference: check_routing accepts one-ulp ties and rejects real differences") {
  const DType dt = DType::kBF16;
  const MoeConfig c = tiny_config(4, 2, dt);
  // Token 0 has a one-ulp near-tie between experts 1 and 2 at the boundary; token 1 does not.
  const float quarter = 0.25f;
  const float below = bits_to_float(dt, float_to_bits(dt, quarter) - 1);
  Routing ref;
  ref.tokens = 2;
  ref.top_k = 2;
  ref.probs = {0.5f, quarter, below, 0.0625f, 0.0625f, 0.125f, 0.5f, 0.25f};
  ref.ids = {0, 1, 2, 3};
  ref.weights = {0.5f, quarter, 0.5f, 0.25f};

  CHECK(check_routing(c, ref, ref.ids, ref.weights) == "");
  // Same sets in another order.
  CHECK(check_routing(c, ref, std::vector<std::int32_t>{1, 0, 3, 2},
                      std::vector<float>{quarter, 0.5f, 0.25f, 0.5f}) == "");
  // The near-tie swap on token 0.
  CHECK(check_routing(c, ref, std::vector<std::int32_t>{0, 2, 2, 3},
                      std::vector<float>{0.5f, below, 0.5f, 0.25f}) == "");
  // A swap on token 1, whose 2nd and 3rd probs (0.25, 0.125) are far apart.
  const std::string far = check_routing(c, ref, std::vector<std::int32_t>{0, 1, 2, 1},
                                        std::vector<float>{0.5f, quarter, 0.5f, 0.125f});
  INFO(far);
  CHECK(far.find("token 1") != std::string::npos);
  CHECK(far.find("{2, 1}") != std::string::npos);
  // On token 0, swapping in expert 3 (far below the boundary) is not a tie.
  CHECK(check_routing(c, ref, std::vector<std::int32_t>{0, 3, 2, 3},
                      std::vector<float>{0.5f, 0.0625f, 0.5f, 0.25f}) != "");
  // Weights: one ulp off is accepted, two are not.
  const float up_one = bits_to_float(dt, float_to_bits(dt, 0.5f) + 1);
  const float up_two = bits_to_float(dt, float_to_bits(dt, 0.5f) + 2);
  CHECK(check_routing(c, ref, ref.ids, std::vector<float>{up_one, quarter, 0.5f, 0.25f}) == "");
  CHECK(check_routing(c, ref, ref.ids, std::vector<float>{up_two, quarter, 0.5f, 0.25f}) != "");
  CHECK(check_routing(c, ref, ref.ids, std::vector<float>{NAN, quarter, 0.5f, 0.25f}) != "");

  // One ulp is taken at the logits (reference.h): at max |logit| = 4 the bf16 logit ulp is 2^-5,
  // so probs may differ by a factor exp(2^-4) - 1 = 6.5%: 3% is a tie, 20% is not.
  Routing wide = ref;
  wide.max_abs_logit = {4.0f, 4.0f};
  const std::vector<std::int32_t> swap = {0, 2, 2, 3};
  wide.probs[2] = 0.2421875f;  // 3% below 0.25, exact in bf16
  CHECK(check_routing(c, wide, swap, std::vector<float>{0.5f, 0.2421875f, 0.5f, 0.25f}) == "");
  ref.probs[2] = 0.2421875f;
  CHECK(check_routing(c, ref, swap, std::vector<float>{0.5f, 0.2421875f, 0.5f, 0.25f}) != "");
  wide.probs[2] = 0.19921875f;  // 20% below
  CHECK(check_routing(c, wide, swap, std::vector<float>{0.5f, 0.19921875f, 0.5f, 0.25f}) != "");
  // Weights get the same allowance: 3% off passes at |logit| 4, 20% does not.
  CHECK(check_routing(c, wide, ref.ids, std::vector<float>{0.515625f, quarter, 0.5f, 0.25f}) == "");
  CHECK(check_routing(c, wide, ref.ids, std::vector<float>{0.6f, quarter, 0.5f, 0.25f}) != "");
}

}  // namespace rt_moe::test
