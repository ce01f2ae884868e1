// Cache keys: XXH3-128 over the complete preimage of a binary. The preimage is every input that
// affects the compiled bytes (cache schema version, generated source, every embedded header's
// bytes, normalized options, exact arch, NVRTC version), as named, length-prefixed fields. The
// preimage is stored in each entry and compared on load, so a hash collision is a miss, not a
// wrong kernel.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rt_moe::cache {

// Bump when the entry format or the meaning of any preimage field changes.
inline constexpr std::uint32_t kSchemaVersion = 1;

struct Key {
  std::uint64_t high = 0;
  std::uint64_t low = 0;
  std::string hex() const;  // 32 lowercase hex digits, high first
  friend bool operator==(const Key&, const Key&) = default;
};

struct KeyHash {
  std::size_t operator()(const Key& key) const noexcept { return key.low ^ (key.high * 31); }
};

// The key of raw preimage bytes, as Preimage::key() computes it (used to check a stored preimage).
Key key_of(std::string_view preimage_bytes);

class Preimage {
 public:
  Preimage();  // starts with the field ("schema", kSchemaVersion)
  // Appends one field; the encoding is unambiguous (lengths precede name and value), so
  // ("ab","c") and ("a","bc") differ.
  Preimage& add(std::string_view name, std::string_view value);
  const std::string& bytes() const { return bytes_; }
  Key key() const;

 private:
  std::string bytes_;
};

}  // namespace rt_moe::cache
