// The keys and binaries of rt_moe_cache_child (cache_child.cpp), shared with the tests that check
// the directory its processes leave behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "key.h"

namespace rt_moe::cache::test {

inline Preimage child_preimage(int key) {
  return Preimage().add("test", "cache_child").add("key", std::to_string(key));
}

// A deterministic fake cubin: the ELF magic, then 2 KiB and more of pseudo-random bytes.
inline std::string child_payload(int key) {
  std::string bytes =
      "\x7f"
      "ELF";
  std::uint32_t state = 2166136261u ^ static_cast<std::uint32_t>(key);
  const std::size_t size = 2048 + 97 * static_cast<std::size_t>(key);
  while (bytes.size() < size) {
    state = state * 1664525u + 1013904223u;
    bytes.push_back(static_cast<char>(state >> 24));
  }
  return bytes;
}

}  // namespace rt_moe::cache::test
