// The even row blocks of the swapped tiles (kernel_templates/even_blocks.h), on the host: what the
// offsets and scatter kernels (dispatch.cuh) and the swapped GEMM (grouped_gemm_sm90_swap.cuh)
// each compute from it must agree, for every expert size a bucket can hold.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "even_blocks.h"

namespace rt_moe {
namespace {

TEST_CASE("even row blocks: every row once, in its block's first rows, blocks within an octet") {
  for (int b : {8, 16, 32, 64, 128, 144, 160, 20, 36}) {
    for (int n = 1; n <= 3 * 160 + 7; ++n) {
      INFO("block rows " << b << ", expert rows " << n);
      const EvenBlocks even(n, b);
      const int blocks = (n + b - 1) / b;  // as many as packed: the padded range is unchanged
      std::vector<int> rows(std::size_t(blocks), 0);
      int total = 0, longest = 0, shortest = b, padded = 0;
      for (int j = 0; j < blocks; ++j) {
        rows[std::size_t(j)] = even.rows(j);
        total += even.rows(j);
        longest = std::max(longest, even.rows(j));
        shortest = std::min(shortest, even.rows(j));
        padded += (even.rows(j) + 7) / 8 * 8;  // the MMAs' N, in octets
      }
      REQUIRE(total == n);
      CHECK(longest <= b);
      CHECK(shortest >= 1);
      if (b % 8 == 0) {
        // Whole octets but for the last block's rest: the expert's MMAs multiply at most 7
        // padding rows, however many blocks it takes.
        CHECK(longest - shortest <= 8);
        CHECK(padded - n <= 7);
        for (int j = 0; j + 1 < blocks; ++j) CHECK(even.rows(j) % 8 == 0);
      } else {
        CHECK(longest - shortest <= 1);  // single rows spread
      }
      CHECK(even.rows(blocks) == even.q);  // past the last block: no extra row
      // row(): a bijection from the expert's rows onto the first rows(j) rows of each block,
      // in order (the scatter's rank i lands where the GEMM counts it).
      std::vector<int> seen(std::size_t(blocks * b), 0);
      int previous = -1;
      bool in_order = true, inside = true;
      for (int i = 0; i < n; ++i) {
        const int at = even.row(i, b);
        if (at < 0 || at >= blocks * b || at % b >= rows[std::size_t(at / b)]) {
          inside = false;
          break;
        }
        ++seen[std::size_t(at)];
        in_order = in_order && at > previous;
        previous = at;
      }
      REQUIRE(inside);
      CHECK(in_order);
      CHECK(std::count(seen.begin(), seen.end(), 1) == n);
    }
  }
  // An expert with no rows: one block's worth of room is never asked for, and no row is placed.
  CHECK(EvenBlocks(0, 128).rows(0) == 0);
}

}  // namespace
}  // namespace rt_moe
