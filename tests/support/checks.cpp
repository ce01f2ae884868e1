// The accuracy rule and the routing check of REFERENCE.md section 2 (reference.h).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <cmath>

#include "reference.h"
#include "rt_moe/error.h"

namespace rt_moe::test {
namespace {

// Position of a dtype value on the number line in steps of one ulp (sign-magnitude -> integer),
// so that adjacent representable values differ by 1 and +0 == -0.
std::int32_t ulp_index(std::uint16_t bits) {
  const std::int32_t magnitude = bits & 0x7fff;
  return (bits & 0x8000) ? -magnitude : magnitude;
}

// Whether a and b (fp32 values of dtype numbers) are at most one ulp of the dtype apart.
bool within_one_ulp(DType dtype, float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return false;
  return std::abs(ulp_index(float_to_bits(dtype, a)) - ulp_index(float_to_bits(dtype, b))) <= 1;
}

// One ulp of the dtype at |value|'s magnitude.
float ulp_at(DType dtype, float value) {
  const std::uint16_t bits = float_to_bits(dtype, std::abs(value));
  return bits_to_float(dtype, static_cast<std::uint16_t>(bits + 1)) - bits_to_float(dtype, bits);
}

// How far the GPU's score s of one expert can be from the reference's (reference.h).
float score_tolerance(const MoeConfig& config, float s, float max_abs_logit) {
  if (std::isnan(s)) return 0.0f;
  const float moved = std::expm1(2.0f * ulp_at(config.dtype, max_abs_logit));
  const float relative =
      config.routing.score == RoutingConfig::Score::kSigmoid ? (1.0f - s) * moved : moved;
  return std::abs(s) * relative + ulp_at(config.dtype, s);
}

float rank_value(float v) { return std::isnan(v) ? -INFINITY : v; }

std::string id_list(std::span<const std::int32_t> ids) {
  return fmt::format("{{{}}}", fmt::join(ids, ", "));
}

}  // namespace

std::string Comparison::describe() const {
  const std::string errors = fmt::format("max_abs_err={:.4g}; rel_l2={:.4g}", max_abs_err, rel_l2);
  if (pass) return fmt::format("PASS {} elements; {}", checked, errors);
  return fmt::format("FAIL {}/{} elements; first at (row {}, col {}): out={} ref={}; {}", bad,
                     checked, first_bad_row, first_bad_col, first_bad_out, first_bad_ref, errors);
}

Comparison compare(DType dtype, std::span<const std::uint16_t> out, std::span<const float> ref,
                   std::int64_t cols, double atol, double rtol) {
  if (out.size() != ref.size() || cols <= 0 || ref.size() % cols != 0) {
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("compare: out has {} elements, ref {}, cols {}", out.size(), ref.size(), cols));
  }
  Comparison c;
  c.checked = static_cast<std::int64_t>(ref.size());
  double diff_sq = 0, ref_sq = 0;
  for (std::int64_t idx = 0; idx < c.checked; ++idx) {
    const float o = bits_to_float(dtype, out[idx]);
    const float r = ref[idx];
    bool ok;
    if (!std::isfinite(r)) {
      // A non-finite reference needs the same kind: NaN, or Inf of the same sign.
      ok = std::isnan(r) ? std::isnan(o) : o == r;
    } else {
      const double err = std::abs(static_cast<double>(o) - r);  // NaN or Inf when o is
      ok = err <= atol + rtol * std::abs(r);                    // false for NaN
      c.max_abs_err = std::isnan(err) ? INFINITY : std::max(c.max_abs_err, err);
      diff_sq += std::isnan(err) ? INFINITY : err * err;
      ref_sq += static_cast<double>(r) * r;
    }
    if (!ok && c.bad++ == 0) {
      c.first_bad_row = idx / cols;
      c.first_bad_col = idx % cols;
      c.first_bad_out = o;
      c.first_bad_ref = r;
    }
  }
  c.rel_l2 = ref_sq > 0 ? std::sqrt(diff_sq / ref_sq) : (diff_sq == 0 ? 0.0 : INFINITY);
  c.pass = c.bad == 0;
  return c;
}

namespace {

// Whether the GPU's `chosen` set for one token is a choice that scores within their tolerance
// would make exact (reference.h); returns the reason when it is not.
std::string explain_choice(const MoeConfig& config, std::span<const std::int32_t> chosen,
                           const float* v, const float* tol) {
  const RoutingConfig& rc = config.routing;
  const std::int64_t e = config.n_routed_experts;
  const std::int64_t n_group = std::max(1, rc.n_group), size = e / n_group;
  const int keep = n_group > 1 ? rc.topk_group : 1;
  std::vector<char> is_chosen(e, 0), kept(n_group, 0);
  float chosen_floor = INFINITY;  // min over chosen of v + tol
  for (const std::int32_t id : chosen) {
    is_chosen[id] = 1;
    kept[id / size] = 1;
    chosen_floor = std::min(chosen_floor, rank_value(v[id]) + tol[id]);
  }
  if (std::count(kept.begin(), kept.end(), 1) > keep) {
    return fmt::format("the experts lie in more than topk_group = {} groups", keep);
  }
  // Group scores and tolerances on the reference's values.
  std::vector<float> group_score(n_group), group_tol(n_group), group_top(n_group);
  for (std::int64_t g = 0; g < n_group; ++g) {
    std::vector<float> values;
    float worst = 0.0f, top = -INFINITY;
    for (std::int64_t j = g * size; j < (g + 1) * size; ++j) {
      values.push_back(rank_value(v[j]));
      worst = std::max(worst, tol[j]);
      top = std::max(top, rank_value(v[j]) - tol[j]);
    }
    std::sort(values.begin(), values.end(), std::greater<>());
    const bool sum2 = rc.group_score == RoutingConfig::GroupScore::kSumTop2 && size >= 2;
    group_score[g] = rank_value(sum2 ? values[0] + values[1] : values[0]);
    group_tol[g] = sum2 ? 2 * worst : worst;
    group_top[g] = top;  // the lowest its best expert can be
  }
  if (n_group > 1) {
    // Fill with the best other groups whose experts all stay below the chosen ones.
    std::vector<std::int64_t> others;
    for (std::int64_t g = 0; g < n_group; ++g) {
      if (!kept[g] && group_top[g] <= chosen_floor) others.push_back(g);
    }
    std::stable_sort(others.begin(), others.end(), [&](std::int64_t a, std::int64_t b) {
      return group_score[a] > group_score[b];
    });
    std::int64_t missing = keep - std::count(kept.begin(), kept.end(), 1);
    for (std::size_t i = 0; i < others.size() && missing > 0; ++i, --missing) kept[others[i]] = 1;
    if (missing > 0) return "too few groups could have been kept with these experts";
    for (std::int64_t a = 0; a < n_group; ++a) {
      for (std::int64_t b = 0; b < n_group; ++b) {
        if (kept[a] && !kept[b] && group_score[b] - group_score[a] > group_tol[a] + group_tol[b]) {
          return fmt::format("dropped group {} (score {}) beats kept group {} (score {})", b,
                             group_score[b], a, group_score[a]);
        }
      }
    }
  }
  for (const std::int32_t c : chosen) {
    for (std::int64_t u = 0; u < e; ++u) {
      if (is_chosen[u] || !kept[u / size]) continue;
      if (rank_value(v[u]) - rank_value(v[c]) > tol[c] + tol[u]) {
        return fmt::format("expert {} (value {}) beats chosen expert {} (value {})", u, v[u], c,
                           v[c]);
      }
    }
  }
  return "";
}

}  // namespace

std::string check_routing(const MoeConfig& config, const Routing& ref,
                          std::span<const std::int32_t> ids, std::span<const float> weights) {
  const std::int64_t k = config.top_k, e = config.n_routed_experts, t_count = ref.tokens;
  if (ref.top_k != k || static_cast<std::int64_t>(ref.probs.size()) != t_count * e ||
      (!ref.selection.empty() && ref.selection.size() != ref.probs.size()) ||
      static_cast<std::int64_t>(ids.size()) != t_count * k || weights.size() != ids.size()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("check_routing: {} ids and {} weights for {} tokens, k={}, E={}",
                            ids.size(), weights.size(), t_count, k, e));
  }
  const DType dt = config.dtype;
  const RoutingConfig& rc = config.routing;
  std::vector<float> tol(e);
  for (std::int64_t t = 0; t < t_count; ++t) {
    const auto got = ids.subspan(t * k, k);
    const auto want = std::span(ref.ids).subspan(t * k, k);
    const float* probs = &ref.probs[t * e];
    const float* v = ref.selection.empty() ? probs : &ref.selection[t * e];
    const float max_abs_logit = ref.max_abs_logit.empty() ? 0.0f : ref.max_abs_logit[t];
    for (std::int64_t j = 0; j < e; ++j) tol[j] = score_tolerance(config, probs[j], max_abs_logit);
    std::vector<std::int32_t> got_set(got.begin(), got.end()), want_set(want.begin(), want.end());
    std::sort(got_set.begin(), got_set.end());
    std::sort(want_set.begin(), want_set.end());
    const std::string where =
        fmt::format("token {}: ids {} vs reference {}", t, id_list(got), id_list(want));

    if (got_set != want_set) {
      if (k == e) return where + " (k == E: every expert must be chosen)";
      if (std::adjacent_find(got_set.begin(), got_set.end()) != got_set.end() ||
          got_set.front() < 0 || got_set.back() >= e) {
        return where + " (repeated or out-of-range id)";
      }
      const std::string why = explain_choice(config, got_set, v, tol.data());
      if (!why.empty()) return fmt::format("{}; not a near-tie: {}", where, why);
      continue;  // a tie swap: the weights of swapped experts have no reference to match
    }
    // The weights: each score within its tol, carried through w = scale * s / sum.
    float sum = 0.0f, sum_tol = 0.0f;
    for (const std::int32_t id : want) {
      sum += probs[id];
      sum_tol += tol[id];
    }
    const float scale = rc.routed_scaling_factor;
    const bool rounds_again = rc.renormalize || scale != 1.0f;
    for (std::int64_t j = 0; j < k; ++j) {
      const auto pos = std::find(want.begin(), want.end(), got[j]) - want.begin();
      const float want_w = ref.weights[t * k + pos], got_w = weights[t * k + j];
      if (within_one_ulp(dt, got_w, want_w)) continue;
      const float s = probs[got[j]];
      float allowed = rc.renormalize ? scale * (tol[got[j]] / sum + s * sum_tol / (sum * sum))
                                     : scale * tol[got[j]];
      if (rounds_again) allowed += ulp_at(dt, std::max(std::abs(got_w), std::abs(want_w)));
      if (!(std::abs(got_w - want_w) <= allowed)) {  // NaN fails
        return fmt::format("{}; expert {} weight {} vs reference {} (allowed difference {})", where,
                           got[j], got_w, want_w, allowed);
      }
    }
  }
  return "";
}

}  // namespace rt_moe::test
