// The bytes of one cache entry file:
//
//   offset  size  field
//        0     8  magic "RTMOECUB"
//        8     4  format version (kSchemaVersion), little-endian
//       12     4  header size (40)
//       16     8  preimage length P
//       24     8  payload length N
//       32     8  XXH3-64 over preimage || payload
//       40     P  preimage (Preimage::bytes())
//     40+P     N  payload: a cubin, so it starts with the ELF magic "\x7fELF"
//
// The file size must be exactly 40 + P + N. Everything is checked before a payload is trusted.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rt_moe::cache {

inline constexpr std::size_t kEntryHeaderBytes = 40;
inline constexpr std::string_view kEntryMagic = "RTMOECUB";
inline constexpr std::string_view kElfMagic =
    "\x7f"
    "ELF";

inline bool is_elf(std::string_view bytes) { return bytes.starts_with(kElfMagic); }

std::string encode_entry(std::string_view preimage, std::string_view payload);

enum class EntryStatus {
  kOk,
  kTruncated,  // shorter than the header, or than the lengths it declares
  kOversized,  // longer than the lengths it declares
  kBadMagic,
  kBadVersion,  // another format version or header size
  kBadChecksum,
  kNotElf,  // the payload is not an ELF image
};

const char* to_string(EntryStatus status);

struct DecodedEntry {
  EntryStatus status = EntryStatus::kTruncated;
  std::string_view preimage;  // views into the decoded bytes; valid only when status is kOk
  std::string_view payload;
};

DecodedEntry decode_entry(std::string_view file);

}  // namespace rt_moe::cache
