// The bus toggles of a stream of data (docs/PERF.md 64a; bit_toggles.cpp, data_energy.cu), on the
// host. Model: a pseudo-channel moves 32 bytes as 8 beats of 32 bits (HBM3), so a lane toggles
// when bit j of beat b differs from bit j of beat b - 1, across bursts too (a linear read's bursts
// follow each other). "ones" is the density of 1 bits. "dbi" adds data bus inversion a byte (a
// byte goes inverted when that toggles fewer of its 8 lanes plus its DBI lane; 9 lanes a byte),
// whether or not the GPU's memory controller uses it for reads.
#pragma once

#include <cstdint>
#include <vector>

struct Toggles {
  double ones = 0;  // fraction of 1 bits
  double raw = 0;   // fraction of the 32 lanes toggling a beat, no inversion
  double dbi = 0;   // fraction of the 36 lanes toggling a beat with per-byte inversion
};

// C++17 (data_energy.cu builds with nvcc -std=c++17, as fmt 9 needs there).
inline int popcount32(std::uint32_t v) { return __builtin_popcount(v); }

inline Toggles bus_toggles(const std::vector<std::uint32_t>& beats) {
  std::uint64_t ones = 0, raw = 0, dbi = 0;
  std::uint32_t prev = 0, prev_sent = 0;  // the last beat, as read and as driven (inverted bytes)
  unsigned prev_flags = 0;                // the last beat's four DBI lanes
  for (std::uint32_t beat : beats) {
    ones += popcount32(beat);
    raw += popcount32(beat ^ prev);
    std::uint32_t sent = 0;
    unsigned flags = 0;
    for (int byte = 0; byte < 4; ++byte) {
      const unsigned shift = 8 * byte;
      const std::uint32_t now = (beat >> shift) & 0xff, was = (prev_sent >> shift) & 0xff;
      const unsigned flag_was = (prev_flags >> byte) & 1;
      const int plain = popcount32(now ^ was) + (flag_was != 0);
      const int inverted = popcount32((~now & 0xff) ^ was) + (flag_was != 1);
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
