// The tuner's rounds (runtime/src/tuning_rounds.h), with made-up times in place of timed
// forwards: each round times every candidate still in once, in its own order; after the first
// rounds the candidates over the pruning ratio are out and keep the times they had; the fastest
// is never out; no candidate always follows the same one.
#include <catch2/catch.hpp>

#include <cstddef>
#include <limits>
#include <set>
#include <vector>

#include "tuning_rounds.h"

namespace rt_moe {
namespace {

struct Call {
  std::size_t candidate;
  int round;
  std::size_t position;
};

}  // namespace

TEST_CASE("tuning rounds: every candidate once a round, each round in its own order", "[tune]") {
  const std::size_t n = 9;
  const TuningRounds r;
  std::vector<Call> calls;
  // Equal times: nobody is pruned, so every round holds all n.
  const auto times = run_tuning_rounds(n, r, [&](std::size_t c, int round, std::size_t pos) {
    calls.push_back({c, round, pos});
    return 1.0;
  });
  REQUIRE(calls.size() == n * std::size_t(r.rounds));
  std::set<std::vector<std::size_t>> orders;
  for (int round = 0; round < r.rounds; ++round) {
    std::vector<std::size_t> order;
    for (const Call& call : calls) {
      if (call.round == round) {
        CHECK(call.position == order.size());  // positions count up within a round
        order.push_back(call.candidate);
      }
    }
    REQUIRE(order.size() == n);
    CHECK(std::set<std::size_t>(order.begin(), order.end()).size() == n);  // a permutation
    orders.insert(order);
  }
  CHECK(orders.size() > std::size_t(r.rounds) / 2);  // not one order over and over
  for (const std::vector<double>& t : times) CHECK(t.size() == std::size_t(r.rounds));

  // Each candidate follows more than one other candidate over the rounds (a rotated order would
  // give each the same predecessor every round).
  std::vector<std::set<std::size_t>> before(n);
  for (std::size_t i = 1; i < calls.size(); ++i) {
    if (calls[i].round == calls[i - 1].round)
      before[calls[i].candidate].insert(calls[i - 1].candidate);
  }
  for (std::size_t c = 0; c < n; ++c) {
    INFO("candidate " << c);
    CHECK(before[c].size() > 1);
  }
}

TEST_CASE("tuning rounds: after the first rounds, candidates over the ratio are out", "[tune]") {
  // Candidate times: 1.0 (the fastest), 1.1 and 1.15 (in: within 1.15 x), 1.2 and 3.0 (out).
  const std::vector<double> ms = {1.2, 1.0, 3.0, 1.1, 1.15};
  TuningRounds r;
  r.rounds = 10;
  r.prune_after = 3;
  r.prune_ratio = 1.15;
  std::vector<int> calls_in_round(std::size_t(r.rounds), 0);
  const auto times = run_tuning_rounds(ms.size(), r, [&](std::size_t c, int round, std::size_t) {
    ++calls_in_round[std::size_t(round)];
    return ms[c];
  });
  CHECK(times[1].size() == 10);
  CHECK(times[3].size() == 10);
  CHECK(times[4].size() == 10);
  CHECK(times[0].size() == 3);  // out after round 3, its three times kept
  CHECK(times[2].size() == 3);
  for (int round = 0; round < r.rounds; ++round) {
    CHECK(calls_in_round[std::size_t(round)] == (round < 3 ? 5 : 3));
  }
  for (std::size_t c = 0; c < ms.size(); ++c) CHECK(median_of(times[c]) == ms[c]);
}

TEST_CASE("tuning rounds: the median decides, one slow outlier does not prune", "[tune]") {
  // Candidate 1 is the fastest but for one slow forward in its first three (a clock dip): its
  // median is still the fastest, and candidate 0, 10% slower, stays in.
  TuningRounds r;
  r.rounds = 6;
  const auto times = run_tuning_rounds(2, r, [&](std::size_t c, int round, std::size_t) {
    if (c == 1) return round == 0 ? 5.0 : 1.0;
    return 1.1;
  });
  CHECK(times[0].size() == 6);
  CHECK(times[1].size() == 6);
  CHECK(median_of(times[1]) == 1.0);
  CHECK(median_of({}) == std::numeric_limits<double>::infinity());
}

TEST_CASE("tuning rounds: one candidate, and none", "[tune]") {
  const TuningRounds r;
  int calls = 0;
  const auto one = run_tuning_rounds(1, r, [&](std::size_t, int, std::size_t) {
    ++calls;
    return 2.0;
  });
  CHECK(calls == r.rounds);
  CHECK(median_of(one[0]) == 2.0);
  const auto none = run_tuning_rounds(0, r, [&](std::size_t, int, std::size_t) {
    ++calls;
    return 2.0;
  });
  CHECK(none.empty());
  CHECK(calls == r.rounds);
}

}  // namespace rt_moe
