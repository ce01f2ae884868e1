// Offline, no GPU (docs/PERF.md version 15): the DeepSeek-V3 preset's expert counts at T tokens for
// rt_moe_bench's inputs (its weight seed 20240601 for the router and bias, x seeded 1000 + T), by
// the reference routing, and the gate/up weight bytes the band order reads if each band of up to
// `band` row blocks of 128 reads its expert's weights once (tile_order.h). The router and bias do
// not depend on I, so the weights are generated with I = 64.
// Build from a configured build/ (after cmake --build build):
//   c++ -O2 -std=c++20 -DFMT_HEADER_ONLY=1 -DSPDLOG_FMT_EXTERNAL=1 -Itests/support
//     -Iruntime/src -Ikernel_templates -Icache -Iruntime/include -isystem /usr/local/cuda/include
//     docs/experiments/expert_counts.cpp build/tests/support/librt_moe_test_support.a
//     build/runtime/librt_moe.a build/tools/presets/librt_moe_presets.a
//     build/cache/librt_moe_cache.a build/kernel_templates/librt_moe_templates.a
//     build/librt_moe_base.a -ldl -lpthread -L/usr/local/cuda/lib64 -lnvrtc -o expert_counts
// Run: ./expert_counts [T] (default 16384).
#include <algorithm>
#include <cstdio>
#include <vector>
#include "bench_expert_counts.h"
#include "rt_moe/presets.h"
using namespace rt_moe;
int main(int argc, char** argv) {
  const long long T = argc > 1 ? atoll(argv[1]) : 16384;
  MoeConfig c = preset("deepseek-v3").moe;
  const int E = int(c.n_routed_experts), k = int(c.top_k);
  const std::vector<long long> counts = bench_expert_counts(c, T);
  std::vector<long long> sorted = counts;
  std::sort(sorted.begin(), sorted.end());
  std::printf("T=%lld counts: min %lld median %lld p90 %lld max %lld\n", T, sorted[0],
              sorted[E / 2], sorted[E * 9 / 10], sorted[E - 1]);
  const double expert_gu = 2.0 * 2048 * 7168 * 2;  // gate + up bytes of one expert
  // Each expert's x rows (its pairs', the shared expert's T) read once from DRAM.
  const double x_once = double(T * (k + c.n_shared_experts)) * c.d_hidden * 2;
  std::printf("x rows gathered once per expert: %.2f GB\n", x_once / 1e9);
  for (int band : {4, 8, 16, 32, 64}) {
    double bytes = 0;
    long long blocks_total = 0, multi = 0;
    for (int e = 0; e < E; ++e) {
      long long blocks = (counts[e] + 127) / 128;
      blocks_total += blocks;
      long long bands = (blocks + band - 1) / band;
      if (bands > 1) multi++;
      bytes += bands * expert_gu;
    }
    long long shared_blocks = (T + 127) / 128;
    double shared = double((shared_blocks + band - 1) / band) * expert_gu;
    std::printf(
        "band %2d: routed weight reads %.2f GB (%lld experts in >1 band, %lld row blocks), shared "
        "%.2f GB, total %.2f GB (weights once: %.2f GB)\n",
        band, bytes / 1e9, multi, blocks_total, shared / 1e9, (bytes + shared) / 1e9,
        (E + 1) * expert_gu / 1e9);
  }
}
