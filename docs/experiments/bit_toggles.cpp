// Offline, no GPU (docs/PERF.md version 64): how many bits the decode forward's weights toggle on
// their way out of DRAM, bf16 against fp16, beside the two buffers whose read energy version 47b
// measured (the HBM ceiling's constant 0x3f803f80 words and FillBits' random bits, 0xbfff a half).
// The weights are the bench's: N(0, 1) at the reference generator's scales (gate and up / sqrt(I),
// down / sqrt(H), DeepSeek-V3 H = 7168, I = 2048), rounded to the dtype, from the test support's
// counter-based generator.
//
// Bus model: a pseudo-channel moves 32 bytes as 8 beats of 32 bits (HBM3), so a bit toggles when
// lane j of beat b differs from lane j of beat b - 1, across bursts too (a linear read's bursts
// follow each other). "ones" is the density of 1 bits. The DBI columns add HBM's data bus
// inversion per byte (a byte goes inverted when that toggles fewer of its 8 lanes plus its DBI
// lane), whether or not the H200's controller uses it for reads.
// Build from a configured build/ (after cmake --build build):
//   c++ -O2 -std=c++20 -Itests/support -Iruntime/include docs/experiments/bit_toggles.cpp
//     build/tests/support/librt_moe_test_support.a -lpthread -o bit_toggles
// Run: ./bit_toggles
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "reference.h"

using namespace rt_moe;

namespace {

struct Toggles {
  double ones = 0;    // fraction of 1 bits
  double raw = 0;     // fraction of lanes toggling a beat, no inversion
  double dbi = 0;     // the same with per-byte inversion, its DBI lanes counted (9 a byte)
};

Toggles measure(const std::vector<std::uint32_t>& beats) {
  std::uint64_t ones = 0, raw = 0, dbi = 0;
  std::uint32_t prev = 0, prev_sent = 0;  // bus state: last beat as driven (after inversion)
  unsigned prev_flags = 0;                // last beat's four DBI lanes
  for (std::uint32_t beat : beats) {
    ones += std::popcount(beat);
    raw += std::popcount(beat ^ prev);
    std::uint32_t sent = 0;
    unsigned flags = 0;
    for (int byte = 0; byte < 4; ++byte) {
      const unsigned shift = 8 * byte;
      const std::uint32_t now = (beat >> shift) & 0xff, was = (prev_sent >> shift) & 0xff;
      const unsigned flag_was = (prev_flags >> byte) & 1;
      const int plain = std::popcount(now ^ was) + (flag_was != 0);
      const int inverted = std::popcount((~now & 0xff) ^ was) + (flag_was != 1);
      const bool invert = inverted < plain;
      dbi += invert ? inverted : plain;
      sent |= (invert ? ~now & 0xff : now) << shift;
      flags |= unsigned(invert) << byte;
    }
    prev = beat;
    prev_sent = sent;
    prev_flags = flags;
  }
  const double n = double(beats.size());
  return {ones / (32 * n), raw / (32 * n), dbi / (36 * n)};
}

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
  print("constant 0x3f803f80 (the ceiling's)", measure(words));
  for (long long i = 0; i < (long long)words.size(); ++i) words[i] = fill_bits(i, 0x5eedu, 0xbfffbfffu);
  print("FillBits 0xbfff (the random read's)", measure(words));
  std::vector<std::uint16_t> halves(kElements);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const char* dt = dtype == DType::kBF16 ? "bf16" : "fp16";
    test::fill_random(halves, dtype, gate_scale, 1);
    const Toggles gate = measure(as_beats(halves));
    test::fill_random(halves, dtype, down_scale, 2);
    const Toggles down = measure(as_beats(halves));
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
