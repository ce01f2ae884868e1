#include "key.h"

#include <cstdio>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace rt_moe::cache {
namespace {

// Lengths are fixed-width little-endian, so the encoding does not depend on the host and a field's
// bytes can never be read as part of its neighbour.
void append_u64(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

std::string Key::hex() const {
  char buffer[33];
  std::snprintf(buffer, sizeof(buffer), "%016llx%016llx", static_cast<unsigned long long>(high),
                static_cast<unsigned long long>(low));
  return std::string(buffer, 32);
}

Preimage::Preimage() { add("schema", std::to_string(kSchemaVersion)); }

Preimage& Preimage::add(std::string_view name, std::string_view value) {
  bytes_.reserve(bytes_.size() + 16 + name.size() + value.size());
  append_u64(bytes_, name.size());
  bytes_.append(name);
  append_u64(bytes_, value.size());
  bytes_.append(value);
  return *this;
}

Key key_of(std::string_view preimage_bytes) {
  const XXH128_hash_t hash = XXH3_128bits(preimage_bytes.data(), preimage_bytes.size());
  return Key{hash.high64, hash.low64};
}

Key Preimage::key() const { return key_of(bytes_); }

}  // namespace rt_moe::cache
