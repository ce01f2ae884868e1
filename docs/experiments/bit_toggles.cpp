// Offline, no GPU (docs/PERF.md version 64): how many bits the decode forward's weights toggle on
// their way out of DRAM, bf16 against fp16, beside the two buffers whose read energy version 47b
// measured (the HBM ceiling's constant 0x3f803f80 words and FillBits' random bits, 0xbfff a half).
// The weights are the bench's: N(0, 1) at the reference generator's scales (gate and up / sqrt(I),
// down / sqrt(H), DeepSeek-V3 H = 7168, I = 2048), rounded to the dtype, from the test support's
// counter-based generator.
//
// The bus model is bus_toggles.h's.
// Build from a configured build/ (after cmake --build build):
//   c++ -O2 -std=c++20 -Itests/support -Iruntime/include docs/experiments/bit_toggles.cpp
//     build/tests/support/librt_moe_test_support.a build/runtime/librt_moe.a
//     build/librt_moe_base.a -lpthread -ldl -o bit_toggles
// Run: ./bit_toggles
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "bus_toggles.h"
#include "reference.h"

using namespace rt_moe;

namespace {

std::vector<std::uint32_t> as_beats(const std::vector<std::uint16_t>& halves) {
  std::vector<std::uint32_t> beats(halves.size() / 2);
  for (std::size_t i = 0; i < beats.size(); ++i) {
    beats[i] = std::uint32_t(halves[2 * i]) | std::uint32_t(halves[2 * i + 1]) << 16;
  }
  return beats;
}

// FillBits<...>::run (kernel_templates/bench.cuh) for word i, on the host.
std::uint32_t fill_bits(long long i, unsigned seed, unsigned mask) {
  unsigned h = unsigned(i) * 0x9e3779b9u ^ unsigned(i >> 32) * 0x85ebca6bu ^ seed;
  h ^= h >> 15;
  h *= 0x2c1b3c6du;
  h ^= h >> 12;
  h *= 0x297a2d39u;
  h ^= h >> 15;
  return h & mask;
}

void print(const char* name, const Toggles& t) {
  std::printf("| %s | %.3f | %.3f | %.3f |\n", name, t.ones, t.raw, t.dbi);
}

}  // namespace

int main() {
  constexpr long long kElements = 1 << 24;  // 32 MiB of each weight kind, 8 of DeepSeek's rows
  const float gate_scale = 1.0f / std::sqrt(2048.0f), down_scale = 1.0f / std::sqrt(7168.0f);
  std::printf("| data | ones | toggles (raw) | toggles (DBI) |\n|---|---:|---:|---:|\n");
  std::vector<std::uint32_t> words(kElements / 2);
  for (auto& w : words) w = 0x3f803f80u;
  print("constant 0x3f803f80 (the ceiling's)", bus_toggles(words));
  for (long long i = 0; i < (long long)words.size(); ++i)
    words[i] = fill_bits(i, 0x5eedu, 0xbfffbfffu);
  print("FillBits 0xbfff (the random read's)", bus_toggles(words));
  std::vector<std::uint16_t> halves(kElements);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const char* dt = dtype == DType::kBF16 ? "bf16" : "fp16";
    test::fill_random(halves, dtype, gate_scale, 1);
    const Toggles gate = bus_toggles(as_beats(halves));
    test::fill_random(halves, dtype, down_scale, 2);
    const Toggles down = bus_toggles(as_beats(halves));
    char name[64];
    std::snprintf(name, sizeof name, "%s gate/up (N(0,1)/sqrt(2048))", dt);
    print(name, gate);
    std::snprintf(name, sizeof name, "%s down (N(0,1)/sqrt(7168))", dt);
    print(name, down);
    // An expert's bytes: gate + up are two thirds, down one third.
    const Toggles mix{(2 * gate.ones + down.ones) / 3, (2 * gate.raw + down.raw) / 3,
                      (2 * gate.dbi + down.dbi) / 3};
    std::snprintf(name, sizeof name, "%s an expert (2/3 gate/up, 1/3 down)", dt);
    print(name, mix);
  }
  return 0;
}
