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

// Whether two probs of one token are as close as one ulp of its logits allows (reference.h).
bool within_logit_ulp(DType dtype, float a, float b, float max_abs_logit) {
  if (std::isnan(a) || std::isnan(b)) return false;
  if (within_one_ulp(dtype, a, b)) return true;
  const float p = std::max(std::abs(a), std::abs(b));
  const float tolerance = p * std::expm1(2.0f * ulp_at(dtype, max_abs_logit)) + ulp_at(dtype, p);
  return std::abs(a - b) <= tolerance;
}

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

std::string check_routing(const MoeConfig& config, const Routing& ref,
                          std::span<const std::int32_t> ids, std::span<const float> weights) {
  const std::int64_t k = config.top_k, e = config.n_routed_experts, t_count = ref.tokens;
  if (ref.top_k != k || static_cast<std::int64_t>(ref.probs.size()) != t_count * e ||
      static_cast<std::int64_t>(ids.size()) != t_count * k || weights.size() != ids.size()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("check_routing: {} ids and {} weights for {} tokens, k={}, E={}",
                            ids.size(), weights.size(), t_count, k, e));
  }
  const DType dt = config.dtype;
  std::vector<float> sorted(e);
  for (std::int64_t t = 0; t < t_count; ++t) {
    const auto got = ids.subspan(t * k, k);
    const auto want = std::span(ref.ids).subspan(t * k, k);
    const float* probs = &ref.probs[t * e];
    const float max_abs_logit = ref.max_abs_logit.empty() ? 0.0f : ref.max_abs_logit[t];
    std::vector<std::int32_t> got_set(got.begin(), got.end()), want_set(want.begin(), want.end());
    std::sort(got_set.begin(), got_set.end());
    std::sort(want_set.begin(), want_set.end());
    const std::string where =
        fmt::format("token {}: ids {} vs reference {}", t, id_list(got), id_list(want));

    if (got_set != want_set) {
      // Allowed only as a near-tie at the selection boundary: every chosen expert is distinct
      // and at most one ulp below the reference's k-th prob, which is at most one ulp above the
      // (k+1)-th.
      if (k == e) return where + " (k == E: every expert must be chosen)";
      std::copy(probs, probs + e, sorted.begin());
      std::nth_element(sorted.begin(), sorted.begin() + k, sorted.end(), std::greater<>());
      const float next = sorted[k];
      const float kth = *std::min_element(sorted.begin(), sorted.begin() + k);
      if (!within_logit_ulp(dt, kth, next, max_abs_logit)) {
        return fmt::format(
            "{}; k-th and (k+1)-th probs {} and {} are further apart than one logit ulp allows",
            where, kth, next);
      }
      if (std::adjacent_find(got_set.begin(), got_set.end()) != got_set.end() ||
          got_set.front() < 0 || got_set.back() >= e) {
        return where + " (repeated or out-of-range id)";
      }
      for (const std::int32_t id : got_set) {
        if (probs[id] < kth && !within_logit_ulp(dt, probs[id], kth, max_abs_logit)) {
          return fmt::format("{}; expert {} has prob {} below the k-th {}", where, id, probs[id],
                             kth);
        }
      }
      continue;  // a tie swap: the weights of swapped experts have no reference to match
    }
    for (std::int64_t j = 0; j < k; ++j) {
      const auto pos = std::find(want.begin(), want.end(), got[j]) - want.begin();
      const float want_w = ref.weights[t * k + pos], got_w = weights[t * k + j];
      if (!within_logit_ulp(dt, got_w, want_w, max_abs_logit)) {
        return fmt::format("{}; expert {} weight {} vs reference {}", where, got[j], got_w, want_w);
      }
    }
  }
  return "";
}

}  // namespace rt_moe::test
