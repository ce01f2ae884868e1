// The tile order of the persistent grouped GEMMs (kernel_templates/tile_order.h), on the host:
// every (row block, column block) exactly once, and the blocks that share a weight tile or a row
// block's A rows close together in the order, for expert layouts like the offsets kernel builds;
// the same for the units of two row blocks that CTA pairs take.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "tile_order.h"

namespace rt_moe {
namespace {

// What the offsets kernel (dispatch.cuh) writes: each expert's rows padded to block_m, their
// exclusive scan, the expert of every row block, and the block count (clamped to max_blocks).
struct Layout {
  std::vector<int> padded_offsets;
  std::vector<int> block_expert;
  int num_blocks = 0;
};

Layout layout_of(const std::vector<int>& counts, int block_m, int max_blocks) {
  Layout l;
  l.padded_offsets.push_back(0);
  for (int count : counts) {
    const int padded = (count + block_m - 1) / block_m * block_m;
    l.padded_offsets.push_back(l.padded_offsets.back() + padded);
  }
  for (std::size_t e = 0; e < counts.size(); ++e) {
    for (int b = l.padded_offsets[e] / block_m; b < l.padded_offsets[e + 1] / block_m; ++b) {
      l.block_expert.push_back(int(e));
    }
  }
  l.num_blocks = std::min(int(l.block_expert.size()), max_blocks);
  return l;
}

// Units of `unit` row blocks (1, or 2 for CTA pairs): unit u is row blocks [u unit, u unit +
// unit) and belongs to the expert of its first block.
void check_order(const std::vector<int>& counts, int block_m, int col_blocks, int band,
                 int max_blocks, int unit = 1) {
  const Layout l = layout_of(counts, block_m, max_blocks);
  const int units = (l.num_blocks + unit - 1) / unit;
  INFO("experts " << counts.size() << ", block_m " << block_m << ", col_blocks " << col_blocks
                  << ", band " << band << ", num_blocks " << l.num_blocks << ", unit " << unit);
  std::set<std::pair<int, int>> seen;
  // Tile index of each (unit, column block), to measure distances.
  std::vector<int> index(std::size_t(units) * col_blocks, -1);
  for (int tile = 0; tile < units * col_blocks; ++tile) {
    const BandTile t = band_tile(tile, col_blocks, band, units, l.block_expert.data(),
                                 l.padded_offsets.data(), block_m, unit);
    REQUIRE(t.m_block >= 0);
    REQUIRE(t.m_block < l.num_blocks);
    REQUIRE(t.m_block % unit == 0);
    REQUIRE(t.n_block >= 0);
    REQUIRE(t.n_block < col_blocks);
    REQUIRE(t.expert == l.block_expert[t.m_block]);
    REQUIRE(seen.insert({t.m_block / unit, t.n_block}).second);
    index[std::size_t(t.m_block / unit) * col_blocks + t.n_block] = tile;
  }
  REQUIRE(int(seen.size()) == units * col_blocks);
  // Units of one expert within one band, same column block (one weight tile): at most `band`
  // consecutive tiles. One unit across column blocks (its A rows): at most `band` tiles between
  // neighbours.
  for (int m = 0; m < units; ++m) {
    const int e = l.block_expert[m * unit];
    const int first = (l.padded_offsets[e] / block_m + unit - 1) / unit;
    const int band0 = first + (m - first) / band * band;
    for (int n = 0; n < col_blocks; ++n) {
      const int here = index[std::size_t(m) * col_blocks + n];
      const int lead = index[std::size_t(band0) * col_blocks + n];
      CHECK(here - lead >= 0);
      CHECK(here - lead < band);
      if (n + 1 < col_blocks) {
        const int next = index[std::size_t(m) * col_blocks + n + 1];
        CHECK(next - here >= 1);
        CHECK(next - here <= band);
      }
    }
  }
}

}  // namespace

TEST_CASE("tile order: band 1 is column block fastest", "[tile_order]") {
  const Layout l = layout_of({300, 0, 17, 129, 64}, 64, 1 << 20);
  for (int tile = 0; tile < l.num_blocks * 7; ++tile) {
    const BandTile t =
        band_tile(tile, 7, 1, l.num_blocks, l.block_expert.data(), l.padded_offsets.data(), 64);
    CHECK(t.m_block == tile / 7);
    CHECK(t.n_block == tile % 7);
  }
}

TEST_CASE("tile order: every tile once, sharers close together", "[tile_order]") {
  // Hand-made layouts: empty experts, an expert of one row, experts of many blocks, a shared
  // expert of T rows, and a clamped block count that cuts the last expert short.
  check_order({1}, 64, 1, 8, 1 << 20);
  check_order({0, 0, 5, 0}, 128, 16, 8, 1 << 20);
  check_order({1000, 3, 0, 129, 4096}, 128, 28, 8, 1 << 20);
  check_order({1000, 3, 0, 129, 4096}, 64, 16, 3, 1 << 20);
  check_order({512, 512, 512, 16384}, 128, 16, 16, 1 << 20);
  check_order({700, 900, 4096}, 128, 16, 8, 20);
  // Random layouts like the real routing's: E experts of uneven counts plus a shared expert.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int experts = 1 + int(rng() % 64), tokens = 1 + int(rng() % 3000);
    std::vector<int> counts(experts);
    for (int& c : counts) c = int(rng() % (2 * tokens / experts + 2));
    counts.push_back(tokens);  // the shared expert
    const int block_m = rng() % 2 == 0 ? 64 : 128;
    const int col_blocks = 1 + int(rng() % 32), band = 1 + int(rng() % 12);
    check_order(counts, block_m, col_blocks, band, 1 << 20);
    check_order(counts, block_m, col_blocks, band, 1 << 20, 2);
  }
}

TEST_CASE("tile order: CTA pairs take units of two row blocks, every unit once", "[tile_order]") {
  // Experts of odd and even block counts (a unit then ends in the next expert's first block),
  // an expert of one block inside another's unit (it owns no unit), a clamped block count.
  check_order({1}, 128, 1, 8, 1 << 20, 2);
  check_order({129, 1, 300, 0, 5, 4096}, 128, 16, 8, 1 << 20, 2);
  check_order({1000, 3, 0, 129, 4096}, 128, 28, 3, 1 << 20, 2);
  check_order({700, 900, 4096}, 128, 16, 8, 21, 2);
  // With band 1, units go column block fastest: unit tile / col_blocks, column tile % col_blocks.
  const Layout l = layout_of({300, 0, 17, 129, 64}, 64, 1 << 20);
  const int units = (l.num_blocks + 1) / 2;
  for (int tile = 0; tile < units * 7; ++tile) {
    const BandTile t =
        band_tile(tile, 7, 1, units, l.block_expert.data(), l.padded_offsets.data(), 64, 2);
    CHECK(t.m_block == 2 * (tile / 7));
    CHECK(t.n_block == tile % 7);
  }
}

}  // namespace rt_moe
