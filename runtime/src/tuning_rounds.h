// The order in which the tuner times its candidates (tuner.cpp), apart from the GPU so that a CPU
// test can check it: rounds of one timed forward a candidate, each round in its own shuffled
// order (a fixed seed: the same orders in every process of a build), so that no candidate always
// follows the same one; after `prune_after` rounds the candidates whose median is over
// `prune_ratio` x the fastest median are out, their medians so far their times. Timed in turns,
// the candidates see the same clock, which moves by a few percent within a fraction of a second
// under the power cap (docs/PERF.md 29c), where runs of one candidate back to back could catch a
// dip alone. A slow mma.sync candidate draws less power, and forwards timed between such
// candidates ran below the H200's 700 W cap, where the swapped tiles rank ahead of the TMA tile
// that wins at the cap (gpumode bench 2, docs/PERF.md 30f); the rounds left time the near-equal,
// hot candidates only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

namespace rt_moe {

struct TuningRounds {
  int rounds = 15;            // one timed forward of each candidate still in, a round
  int prune_after = 3;        // rounds over all candidates before the slow ones are out
  double prune_ratio = 1.15;  // out: a median over this times the fastest median
  unsigned seed = 7;
};

// The median of `times` (the upper one of an even count); +inf for none.
inline double median_of(std::vector<double> times) {
  if (times.empty()) return std::numeric_limits<double>::infinity();
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Times candidates [0, n) in rounds: time(candidate, round, position) runs and times one forward
// (position: its place in the round's order) and returns its time. Returns every candidate's
// times in the order taken.
template <typename Time>
std::vector<std::vector<double>> run_tuning_rounds(std::size_t n, const TuningRounds& r,
                                                   Time&& time) {
  std::vector<std::vector<double>> times(n);
  std::vector<std::size_t> active(n);
  for (std::size_t i = 0; i < n; ++i) active[i] = i;
  std::mt19937 shuffler(r.seed);
  for (int round = 0; round < r.rounds; ++round) {
    if (round == r.prune_after && !active.empty()) {
      double fastest = std::numeric_limits<double>::infinity();
      for (std::size_t i : active) fastest = std::min(fastest, median_of(times[i]));
      std::vector<std::size_t> kept;
      for (std::size_t i : active) {
        if (median_of(times[i]) <= r.prune_ratio * fastest) kept.push_back(i);
      }
      active = std::move(kept);
    }
    std::shuffle(active.begin(), active.end(), shuffler);
    for (std::size_t position = 0; position < active.size(); ++position) {
      const std::size_t candidate = active[position];
      times[candidate].push_back(time(candidate, round, position));
    }
  }
  return times;
}

}  // namespace rt_moe
