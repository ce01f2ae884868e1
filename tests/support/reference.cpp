// The CPU reference of the MoE forward: routing and the expert computation (reference.h).
//
// NOTES: the forward is organised by expert, not by token, so each weight row is read and
// converted once per block of tokens instead of once per token (the DeepSeek-V3 layer holds 22.5 GB
// of bf16 weights). y = dot(h, w_down) * w is stored per (token, slot) in fp32, and out sums the
// slots in order afterwards. Every value is a dot product in the fixed order of host::dot_block,
// so neither blocking nor the thread count changes a bit of the result.
#include "reference.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "host_parallel.h"
#include "host_simd.h"
#include "rt_moe/error.h"

namespace rt_moe::test {
namespace {

using host::padded;

void require(bool ok, const std::string& what) {
  if (!ok) throw Error(ErrorCode::kInvalidArgument, what);
}

// round_to, inlined for the hot loops.
[[gnu::always_inline]] inline float rounded(DType dtype, float value) {
  return host::to_float(dtype, host::to_bits(dtype, value));
}

// -------------------------------------------------------------------------------------------------
// Routing

// `in` ([rows, cols] dtype bits) as floats, each row zero-padded to a multiple of kLanes.
std::vector<float> padded_floats(DType dtype, const std::uint16_t* in, std::int64_t rows,
                                 std::int64_t cols) {
  const std::int64_t stride = padded(cols);
  std::vector<float> out(rows * stride, 0.0f);
  for (std::int64_t r = 0; r < rows; ++r) {
    host::to_floats(dtype, in + r * cols, out.data() + r * stride, cols);
  }
  return out;
}

// Logits [E] of one token, rounded to the dtype when `round`: 4 router rows per pass over x.
RT_MOE_HOST_CLONES void token_logits(DType dtype, bool round, const float* x, const float* router,
                                     std::int64_t experts, std::int64_t stride, float* logits) {
  auto store = [&](std::int64_t e, float dot) { logits[e] = round ? rounded(dtype, dot) : dot; };
  std::int64_t e = 0;
  for (; e + 4 <= experts; e += 4) {
    const float* rows[4] = {router + e * stride, router + (e + 1) * stride,
                            router + (e + 2) * stride, router + (e + 3) * stride};
    float out[1][4];
    host::dot_block<1, 4>(&x, rows, stride, out);
    for (int j = 0; j < 4; ++j) store(e + j, out[0][j]);
  }
  for (; e < experts; ++e) {
    const float* row = router + e * stride;
    float out[1][1];
    host::dot_block<1, 1>(&x, &row, stride, out);
    store(e, out[0][0]);
  }
}

// Selection order on values: NaN ranks as -inf (the kernel's order_key).
float rank_value(float v) { return std::isnan(v) ? -INFINITY : v; }

// The experts that may be chosen: those of the topk_group best groups, or all without groups.
// `v` holds the token's E selection values.
std::vector<std::int32_t> candidate_experts(const RoutingConfig& r, const float* v,
                                            std::int64_t experts) {
  std::vector<std::int32_t> candidates;
  if (r.n_group <= 1) {
    candidates.resize(experts);
    std::iota(candidates.begin(), candidates.end(), 0);
    return candidates;
  }
  const std::int64_t size = experts / r.n_group;
  std::vector<float> group_score(r.n_group);
  for (int g = 0; g < r.n_group; ++g) {
    std::vector<float> values(v + g * size, v + (g + 1) * size);
    for (float& value : values) value = rank_value(value);
    std::sort(values.begin(), values.end(), std::greater<>());
    const float score = r.group_score == RoutingConfig::GroupScore::kSumTop2
                            ? values[0] + values[1]  // validate(): groups of 2 or more
                            : values[0];
    group_score[g] = rank_value(score);  // inf + -inf
  }
  std::vector<std::int32_t> groups(r.n_group);
  std::iota(groups.begin(), groups.end(), 0);
  std::stable_sort(groups.begin(), groups.end(), [&](std::int32_t a, std::int32_t b) {
    return group_score[a] > group_score[b];  // stable: ties keep the lower group index first
  });
  groups.resize(r.topk_group);
  std::sort(groups.begin(), groups.end());
  for (const std::int32_t g : groups) {
    for (std::int64_t j = 0; j < size; ++j) candidates.push_back(std::int32_t(g * size + j));
  }
  return candidates;
}

// -------------------------------------------------------------------------------------------------
// Forward

// The matrices one slot multiplies by: a routed expert, or one width-I chunk of the shared expert.
struct ExpertView {
  const std::uint16_t* gate;  // (I, H)
  const std::uint16_t* up;    // (I, H)
  const std::uint16_t* down;  // (H, I) inside rows of down_stride elements
  std::int64_t down_stride;
};

// One (token, slot) that an expert serves; `row` indexes the current chunk of tokens.
struct Member {
  std::int64_t row;
  std::int64_t slot;
  float weight;
};

struct Group {
  ExpertView view;
  std::vector<Member> members;
};

// A block of members of one group times a block of weight rows.
struct Item {
  std::int64_t group, member_begin, member_end, row_begin, row_end;
};

constexpr std::int64_t kMembersPerItem = 16;
constexpr std::int64_t kHiddenRowsPerItem = 32;  // rows of gate/up (length H)
constexpr std::int64_t kOutRowsPerItem = 128;    // rows of down (length I)

struct Problem {
  DType dtype;
  std::int64_t h, i, slots;
  std::int64_t h_stride, i_stride;  // padded row lengths of the float buffers
  std::vector<float> x;             // (rows, h_stride) current chunk of tokens
  std::vector<float> hidden;        // (rows, slots, i_stride) dtype-rounded h
  std::vector<float> y;             // (rows, slots, H) fp32, as the GPU keeps it
  std::vector<Group> groups;

  float* hidden_row(const Member& m) { return hidden.data() + (m.row * slots + m.slot) * i_stride; }
};

float silu(float g) { return g / (1.0f + std::exp(-g)); }

// h[i] = dtype(SiLU(x . gate[i]) * (x . up[i])) for a block of members and rows i; two members
// per pass over the converted gate and up rows.
RT_MOE_HOST_CLONES void hidden_item(Problem& p, const Item& item, float* gate_row, float* up_row) {
  const Group& group = p.groups[item.group];
  const float* rows[2] = {gate_row, up_row};
  for (std::int64_t i = item.row_begin; i < item.row_end; ++i) {
    host::to_floats(p.dtype, group.view.gate + i * p.h, gate_row, p.h);
    host::to_floats(p.dtype, group.view.up + i * p.h, up_row, p.h);
    std::int64_t m = item.member_begin;
    for (; m + 2 <= item.member_end; m += 2) {
      const Member* mm[2] = {&group.members[m], &group.members[m + 1]};
      const float* x[2] = {&p.x[mm[0]->row * p.h_stride], &p.x[mm[1]->row * p.h_stride]};
      float gu[2][2];
      host::dot_block<2, 2>(x, rows, p.h_stride, gu);
      for (int a = 0; a < 2; ++a) {
        p.hidden_row(*mm[a])[i] = rounded(p.dtype, silu(gu[a][0]) * gu[a][1]);
      }
    }
    if (m < item.member_end) {
      const Member& one = group.members[m];
      const float* x = &p.x[one.row * p.h_stride];
      float gu[1][2];
      host::dot_block<1, 2>(&x, rows, p.h_stride, gu);
      p.hidden_row(one)[i] = rounded(p.dtype, silu(gu[0][0]) * gu[0][1]);
    }
  }
}

// y[n] = dot(h, down[n]) * weight (fp32) for a block of members and rows n; four members per pass
// over the converted down row.
RT_MOE_HOST_CLONES void output_item(Problem& p, const Item& item, float* down_row) {
  const Group& group = p.groups[item.group];
  auto store = [&](const Member& m, std::int64_t n, float dot) {
    p.y[(m.row * p.slots + m.slot) * p.h + n] = dot * m.weight;
  };
  for (std::int64_t n = item.row_begin; n < item.row_end; ++n) {
    host::to_floats(p.dtype, group.view.down + n * group.view.down_stride, down_row, p.i);
    std::int64_t m = item.member_begin;
    for (; m + 4 <= item.member_end; m += 4) {
      const float* hs[4];
      for (int a = 0; a < 4; ++a) hs[a] = p.hidden_row(group.members[m + a]);
      float d[4][1];
      host::dot_block<4, 1>(hs, &down_row, p.i_stride, d);
      for (int a = 0; a < 4; ++a) store(group.members[m + a], n, d[a][0]);
    }
    for (; m < item.member_end; ++m) {
      const float* h = p.hidden_row(group.members[m]);
      float d[1][1];
      host::dot_block<1, 1>(&h, &down_row, p.i_stride, d);
      store(group.members[m], n, d[0][0]);
    }
  }
}

std::vector<Item> make_items(const std::vector<Group>& groups, std::int64_t rows,
                             std::int64_t rows_per_item) {
  std::vector<Item> items;
  for (std::int64_t g = 0; g < static_cast<std::int64_t>(groups.size()); ++g) {
    const auto members = static_cast<std::int64_t>(groups[g].members.size());
    for (std::int64_t m = 0; m < members; m += kMembersPerItem) {
      for (std::int64_t r = 0; r < rows; r += rows_per_item) {
        items.push_back(
            {g, m, std::min(members, m + kMembersPerItem), r, std::min(rows, r + rows_per_item)});
      }
    }
  }
  return items;
}

}  // namespace

Routing reference_routing(const MoeConfig& config, std::span<const std::uint16_t> x,
                          std::span<const std::uint16_t> router, std::int64_t tokens,
                          std::span<const float> router_bias) {
  config.validate();
  const RoutingConfig& rc = config.routing;
  const std::int64_t h = config.d_hidden, e = config.n_routed_experts, k = config.top_k;
  require(tokens >= 0 && static_cast<std::int64_t>(x.size()) == tokens * h,
          fmt::format("reference_routing: x has {} elements, want tokens * H = {}", x.size(),
                      tokens * h));
  require(static_cast<std::int64_t>(router.size()) == e * h,
          fmt::format("reference_routing: router has {} elements, want E * H = {}", router.size(),
                      e * h));
  require(!rc.correction_bias || static_cast<std::int64_t>(router_bias.size()) == e,
          fmt::format("reference_routing: the config uses a correction bias; router_bias has {} "
                      "elements, want E = {}",
                      router_bias.size(), e));
  const DType dt = config.dtype;
  const std::int64_t stride = padded(h);
  const std::vector<float> router_f = padded_floats(dt, router.data(), e, h);

  Routing out;
  out.tokens = tokens;
  out.top_k = k;
  out.ids.resize(tokens * k);
  out.weights.resize(tokens * k);
  out.probs.resize(tokens * e);
  out.selection.resize(tokens * e);
  out.max_abs_logit.resize(tokens);
  host::parallel_items(tokens, [&] {
    return [&, xf = std::vector<float>(stride, 0.0f),
            logits = std::vector<float>(e)](std::int64_t t) mutable {
      host::to_floats(dt, &x[t * h], xf.data(), h);
      token_logits(dt, !rc.logits_fp32, xf.data(), router_f.data(), e, stride, logits.data());
      float max_abs = 0.0f;
      for (float l : logits) max_abs = std::max(max_abs, std::abs(l));
      out.max_abs_logit[t] = max_abs;
      float* probs = &out.probs[t * e];
      if (rc.score == RoutingConfig::Score::kSoftmax) {
        // Softmax in fp32 over the (rounded) logits.
        const float max_logit = *std::max_element(logits.begin(), logits.end());
        float sum = 0.0f;
        for (float& l : logits) sum += (l = std::exp(l - max_logit));
        for (std::int64_t j = 0; j < e; ++j) probs[j] = round_to(dt, logits[j] / sum);
      } else {
        for (std::int64_t j = 0; j < e; ++j) {
          probs[j] = round_to(dt, 1.0f / (1.0f + std::exp(-logits[j])));
        }
      }
      float* v = &out.selection[t * e];
      for (std::int64_t j = 0; j < e; ++j) {
        v[j] = rc.correction_bias ? probs[j] + router_bias[j] : probs[j];
      }
      // Top-k on v among the candidates, ties toward the lower index (NaN as -inf).
      std::vector<std::int32_t> order = candidate_experts(rc, v, e);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](std::int32_t a, std::int32_t b) {
                          const float va = rank_value(v[a]), vb = rank_value(v[b]);
                          return va > vb || (va == vb && a < b);
                        });
      float chosen_sum = 0.0f;
      for (std::int64_t j = 0; j < k; ++j) chosen_sum += probs[order[j]];
      for (std::int64_t j = 0; j < k; ++j) {
        float w = probs[order[j]];
        if (rc.renormalize) w /= chosen_sum;
        w *= rc.routed_scaling_factor;
        out.ids[t * k + j] = order[j];
        out.weights[t * k + j] = round_to(dt, w);  // exact for the default routing
      }
    };
  });
  return out;
}

std::vector<float> reference_forward(const MoeConfig& config, const HostWeights& weights,
                                     std::span<const std::uint16_t> x, std::int64_t tokens,
                                     std::span<const std::int32_t> ids,
                                     std::span<const float> topk_weights,
                                     std::span<const std::int64_t> token_subset) {
  config.validate();
  const std::int64_t h = config.d_hidden, i = config.d_expert, e = config.n_routed_experts;
  const std::int64_t k = config.top_k, s = config.n_shared_experts;
  auto require_size = [](std::size_t size, std::int64_t want, const char* what) {
    require(static_cast<std::int64_t>(size) == want,
            fmt::format("reference_forward: {} has {} elements, want {}", what, size, want));
  };
  require_size(x.size(), tokens * h, "x");
  require_size(ids.size(), tokens * k, "ids");
  require_size(topk_weights.size(), tokens * k, "topk_weights");
  require_size(weights.gate.size(), e * i * h, "weights.gate");
  require_size(weights.up.size(), e * i * h, "weights.up");
  require_size(weights.down.size(), e * h * i, "weights.down");
  require_size(weights.shared_gate.size(), s * i * h, "weights.shared_gate");
  require_size(weights.shared_up.size(), s * i * h, "weights.shared_up");
  require_size(weights.shared_down.size(), h * s * i, "weights.shared_down");
  for (const std::int64_t t : token_subset) {
    require(t >= 0 && t < tokens, fmt::format("reference_forward: token {} out of range", t));
  }
  for (const std::int32_t id : ids) {
    require(id >= 0 && id < e, fmt::format("reference_forward: expert id {} out of range", id));
  }

  std::vector<std::int64_t> rows(token_subset.begin(), token_subset.end());
  if (token_subset.empty()) {
    rows.resize(tokens);
    std::iota(rows.begin(), rows.end(), 0);
  }
  const auto n_rows = static_cast<std::int64_t>(rows.size());
  std::vector<float> out(n_rows * h);

  Problem p{.dtype = config.dtype, .h = h, .i = i, .slots = k + s};
  p.h_stride = padded(h);
  p.i_stride = padded(i);
  // Tokens in chunks, so the buffers stay near 1 GiB whatever T is; each chunk streams all the
  // weights it uses once, so larger chunks mean fewer passes over them.
  const std::int64_t bytes_per_row = sizeof(float) * (p.h_stride + p.slots * (p.i_stride + h));
  const std::int64_t chunk = std::max<std::int64_t>(1, (std::int64_t{1} << 30) / bytes_per_row);

  for (std::int64_t first = 0; first < n_rows; first += chunk) {
    const std::int64_t count = std::min(chunk, n_rows - first);
    p.x.assign(count * p.h_stride, 0.0f);
    p.hidden.assign(count * p.slots * p.i_stride, 0.0f);
    p.y.assign(count * p.slots * h, 0.0f);
    for (std::int64_t r = 0; r < count; ++r) {
      host::to_floats(p.dtype, &x[rows[first + r] * h], &p.x[r * p.h_stride], h);
    }

    p.groups.clear();
    for (std::int64_t ex = 0; ex < e; ++ex) {
      p.groups.push_back(
          {{&weights.gate[ex * i * h], &weights.up[ex * i * h], &weights.down[ex * h * i], i}, {}});
    }
    for (std::int64_t r = 0; r < count; ++r) {
      const std::int64_t t = rows[first + r];
      for (std::int64_t j = 0; j < k; ++j) {
        p.groups[ids[t * k + j]].members.push_back({r, j, topk_weights[t * k + j]});
      }
    }
    for (std::int64_t c = 0; c < s; ++c) {
      Group shared{{&weights.shared_gate[c * i * h], &weights.shared_up[c * i * h],
                    &weights.shared_down[c * i], s * i},
                   {}};
      for (std::int64_t r = 0; r < count; ++r) shared.members.push_back({r, k + c, 1.0f});
      p.groups.push_back(std::move(shared));
    }

    const std::vector<Item> hidden_items = make_items(p.groups, i, kHiddenRowsPerItem);
    host::parallel_items(static_cast<std::int64_t>(hidden_items.size()), [&] {
      return [&, gate = std::vector<float>(p.h_stride, 0.0f),
              up = std::vector<float>(p.h_stride, 0.0f)](std::int64_t item) mutable {
        hidden_item(p, hidden_items[item], gate.data(), up.data());
      };
    });
    const std::vector<Item> output_items = make_items(p.groups, h, kOutRowsPerItem);
    host::parallel_items(static_cast<std::int64_t>(output_items.size()), [&] {
      return [&, down = std::vector<float>(p.i_stride, 0.0f)](std::int64_t item) mutable {
        output_item(p, output_items[item], down.data());
      };
    });

    // out = dtype(sum of the slots in order), in fp32 from 0.
    host::parallel_items(count, [&] {
      return [&](std::int64_t r) {
        for (std::int64_t n = 0; n < h; ++n) {
          float sum = 0.0f;
          for (std::int64_t slot = 0; slot < p.slots; ++slot) {
            sum += p.y[(r * p.slots + slot) * h + n];
          }
          out[(first + r) * h + n] = rounded(p.dtype, sum);
        }
      };
    });
  }
  return out;
}

}  // namespace rt_moe::test
