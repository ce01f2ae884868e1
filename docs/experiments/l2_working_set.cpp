// Offline, no GPU (docs/PERF.md version 17e): how many bytes the prefill gate/up GEMM
// (grouped_gemm_sm90_ws.cuh, 128 x 256 tiles, tile_order.h's bands) should read from DRAM if L2
// were one LRU cache of C bytes, for a persistent grid of N CTAs. The tiles are handed out in
// tile order, each to the CTA that frees first; a tile lasts one unit of time per consumer
// warpgroup with rows (a warpgroup of padding skips its MMAs), +-5% at random, its 112 K steps
// evenly spread over it. Each K step reads the tile's A chunk (its row block's x rows: 128 B a
// row with a pair) and its B chunk (the expert's 128 gate and 128 up rows of that K step: 32 KB).
// An access misses when the bytes of the distinct chunks read since its chunk's last read, with
// its own, exceed C (LRU stack distance). The expert counts are those of rt_moe_bench's inputs
// (weight seed 20240601, x seed 1000 + T) by the reference routing, as in expert_counts.cpp.
// Build from a configured build/ (after cmake --build build), as expert_counts.cpp:
//   c++ -O2 -std=c++20 -DFMT_HEADER_ONLY=1 -DSPDLOG_FMT_EXTERNAL=1 -Itests/support
//     -Iruntime/src -Ikernel_templates -Icache -Iruntime/include -isystem /usr/local/cuda/include
//     docs/experiments/l2_working_set.cpp build/tests/support/librt_moe_test_support.a
//     build/runtime/librt_moe.a build/tools/presets/librt_moe_presets.a
//     build/cache/librt_moe_cache.a build/kernel_templates/librt_moe_templates.a
//     build/librt_moe_base.a -ldl -lpthread -L/usr/local/cuda/lib64 -lnvrtc -o l2_working_set
// Run: ./l2_working_set [T] [band] [r|e] [spread] [s|p|c|v] [preset] [r|b] (defaults 16384, 8, r,
// 0.05, s, deepseek-v3, r; gpumode-moe has the same H and I; "b": balanced routing, T k / E rows an
// expert, as rt_moe_bench --balanced-routing): "e" gives every tile two units (as if a
// warpgroup of padding multiplied too, as main does since 18defa3), spread the random +- on
// lengths; "p" models CTA pairs (the c2 tiles, docs/PERF.md 21c): 66 and 33 clusters, each
// taking a unit of two row blocks (tile_order.h with unit 2) in lockstep, a tile as long as its
// longer row block's, each K step reading both row blocks' A chunks and the B chunk of each
// distinct expert of the two (one read when they share it: the multicast); "c" and "v" are pairs
// under other orders and layouts (below).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <queue>
#include <random>
#include <unordered_map>
#include <vector>

#include "bench_expert_counts.h"
#include "rt_moe/presets.h"
#include "tile_order.h"

using namespace rt_moe;

namespace {

constexpr int kBlockM = 128, kColBlocks = 16, kKSteps = 112;  // DeepSeek-V3 gate/up, 128 x 256
constexpr double kWeightChunk = 256.0 * 128;                  // B bytes of one K step

struct Event {
  double time;
  long long chunk;  // A chunks: row block * kKSteps + k; B chunks: offset by kBChunks
  double bytes;
  bool weight;
};

// Byte-weighted Fenwick tree over event positions: the bytes of each chunk sit at its last read.
struct Fenwick {
  std::vector<double> tree;
  explicit Fenwick(std::size_t n) : tree(n + 1, 0.0) {}
  void add(std::size_t i, double v) {
    for (++i; i < tree.size(); i += i & (~i + 1)) tree[i] += v;
  }
  double prefix(std::size_t i) const {  // sum of [0, i)
    double s = 0;
    for (; i > 0; i -= i & (~i + 1)) s += tree[i];
    return s;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const long long T = argc > 1 ? atoll(argv[1]) : 16384;
  const int band = argc > 2 ? atoi(argv[2]) : 8;
  const bool equal =
      argc > 3 && argv[3][0] == 'e';  // "e": every tile 2 units (padding WGs multiply too)
  const double spread = argc > 4 ? atof(argv[4]) : 0.05;  // +- this much at random
  const bool pairs = argc > 5 && (argv[5][0] == 'p' || argv[5][0] == 'c' || argv[5][0] == 'v');
  // "c": pairs in chained bands (a model of an order, not tile_order.h's): a band ends where a
  // unit starts an expert's row blocks (no unit holds two experts across it) or at `band` units.
  const bool chained = argc > 5 && argv[5][0] == 'c';
  // "v": pairs over a layout that pads every expert to an even number of row blocks (an all-padding
  // block for the odd ones), so that no unit holds two experts.
  const bool even_layout = argc > 5 && argv[5][0] == 'v';
  const int unit = pairs ? 2 : 1;
  // A preset of H = 7168 and I = 2048 (the constants above): deepseek-v3 or gpumode-moe.
  MoeConfig c = preset(argc > 6 ? argv[6] : "deepseek-v3").moe;
  if (c.d_hidden != 7168 || c.d_expert != 2048) {
    std::fprintf(stderr, "l2_working_set: the model's constants are for H = 7168, I = 2048\n");
    return 1;
  }
  const int E = int(c.n_routed_experts);
  // "b" (7th argument): the balanced routing of rt_moe_bench --balanced-routing, T k / E rows an
  // expert; else the bench's random inputs' routing.
  const bool balanced = argc > 7 && argv[7][0] == 'b';
  std::vector<long long> counts = balanced ? std::vector<long long>(std::size_t(E), T * c.top_k / E)
                                           : bench_expert_counts(c, T);
  counts.push_back(T);  // the shared expert's chunk: every token

  // The sorted layout: experts' rows padded to 128, routed experts first (Offsets).
  std::vector<int> padded_offsets(E + 2, 0), block_expert;
  std::vector<int> block_rows;  // rows with a pair in each row block
  for (int e = 0; e <= E; ++e) {
    long long blocks = (counts[e] + kBlockM - 1) / kBlockM;
    if (even_layout) blocks += blocks % 2;
    padded_offsets[e + 1] = padded_offsets[e] + int(blocks * kBlockM);
    for (long long b = 0; b < blocks; ++b) {
      block_expert.push_back(e);
      block_rows.push_back(int(std::clamp<long long>(counts[e] - b * kBlockM, 0, kBlockM)));
    }
  }
  const int num_blocks = int(block_expert.size());
  const int num_units = (num_blocks + unit - 1) / unit;
  const long long tiles = (long long)num_units * kColBlocks;
  const long long b_chunks_base = (long long)num_blocks * kKSteps;
  const long long half =
      std::count_if(block_rows.begin(), block_rows.end(), [](int rows) { return rows <= 64; });
  std::printf(
      "T=%lld: %d row blocks (%lld of 64 rows or fewer: one consumer warpgroup), %lld "
      "tiles, band %d, %s tiles, +-%.0f%%%s\n",
      T, num_blocks, half, tiles, band, equal ? "equal" : "half-length 64-row", 100 * spread,
      pairs ? ", CTA pairs (units of two row blocks; counts are clusters)" : "");

  // Chained bands: [band_start[i], band_start[i + 1]) units.
  std::vector<int> band_start = {0};
  for (int u = 1; u < num_units && chained; ++u) {
    const int e = block_expert[2 * u];
    const bool clean = padded_offsets[e] / kBlockM == 2 * u;
    if (clean || u - band_start.back() >= band) band_start.push_back(u);
  }
  band_start.push_back(num_units);

  for (int ctas : pairs ? std::vector<int>{66, 33} : std::vector<int>{132, 66}) {
    // Hand the tiles out in order to the CTA that frees first.
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> jitter(1.0 - spread, 1.0 + spread);
    std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>, std::greater<>>
        free_at;
    for (int i = 0; i < ctas; ++i) free_at.push({0.0, i});
    std::vector<Event> events;
    events.reserve(std::size_t(tiles) * kKSteps * 2);
    std::size_t chain = 0;
    for (long long tile = 0; tile < tiles; ++tile) {
      BandTile b = chained ? BandTile{}
                           : band_tile(int(tile), kColBlocks, band, num_units, block_expert.data(),
                                       padded_offsets.data(), kBlockM, unit);
      if (chained) {
        while ((long long)band_start[chain + 1] * kColBlocks <= tile) ++chain;
        const int rows_in_band = band_start[chain + 1] - band_start[chain];
        const long long local = tile - (long long)band_start[chain] * kColBlocks;
        b.n_block = int(local / rows_in_band);
        b.m_block = 2 * (band_start[chain] + int(local % rows_in_band));
        b.expert = block_expert[b.m_block];
      }
      // The unit's row blocks (one, or two for a pair; a missing last block has no rows).
      int m[2] = {b.m_block, b.m_block + 1}, rows[2] = {block_rows[b.m_block], 0};
      const int blocks = pairs && m[1] < num_blocks ? 2 : 1;
      if (blocks == 2) rows[1] = block_rows[m[1]];
      const int longest = std::max(rows[0], rows[1]);
      const double length = (equal || longest > 64 ? 2.0 : 1.0) * jitter(rng);
      auto [start, cta] = free_at.top();
      free_at.pop();
      free_at.push({start + length, cta});
      for (int s = 0; s < kKSteps; ++s) {
        const double t = start + length * (s + 0.5) / kKSteps;
        for (int i = 0; i < blocks; ++i) {
          events.push_back({t, (long long)m[i] * kKSteps + s, rows[i] * 128.0, false});
          const int expert = block_expert[m[i]];
          if (i == 1 && expert == block_expert[m[0]]) continue;  // multicast: read once
          events.push_back(
              {t, b_chunks_base + ((long long)expert * kColBlocks + b.n_block) * kKSteps + s,
               kWeightChunk, true});
        }
      }
    }
    std::stable_sort(events.begin(), events.end(),
                     [](const Event& a, const Event& b) { return a.time < b.time; });

    // LRU stack distance (bytes of other distinct chunks since the last read) of every re-read.
    Fenwick live(events.size());
    std::unordered_map<long long, std::size_t> last;
    last.reserve(events.size() / 4);
    const std::vector<double> capacities_mb = {10, 20, 25, 30, 40, 50};
    std::vector<double> miss_x(capacities_mb.size(), 0), miss_w(capacities_mb.size(), 0);
    double first_x = 0, first_w = 0;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const Event& ev = events[i];
      auto it = last.find(ev.chunk);
      if (it == last.end()) {
        (ev.weight ? first_w : first_x) += ev.bytes;
      } else {
        const double distance = live.prefix(i) - live.prefix(it->second + 1) + ev.bytes;
        for (std::size_t j = 0; j < capacities_mb.size(); ++j) {
          if (distance > capacities_mb[j] * 1e6) (ev.weight ? miss_w[j] : miss_x[j]) += ev.bytes;
        }
        live.add(it->second, -ev.bytes);
      }
      live.add(i, ev.bytes);
      last[ev.chunk] = i;
    }
    std::printf("%d CTAs: compulsory reads x %.2f GB, weights %.2f GB\n", ctas, first_x / 1e9,
                first_w / 1e9);
    for (std::size_t j = 0; j < capacities_mb.size(); ++j) {
      std::printf("  L2 of %2.0f MB: x re-read %.2f GB, weights re-read %.2f GB, total %.2f GB\n",
                  capacities_mb[j], miss_x[j] / 1e9, miss_w[j] / 1e9,
                  (first_x + first_w + miss_x[j] + miss_w[j]) / 1e9);
    }
  }
}
