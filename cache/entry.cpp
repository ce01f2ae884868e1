#include "entry.h"

#include "key.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace rt_moe::cache {
namespace {

void put_le(char* out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

std::uint64_t get_le(const char* in, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  }
  return value;
}

std::uint64_t checksum(std::string_view preimage, std::string_view payload) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, preimage.data(), preimage.size());
  XXH3_64bits_update(&state, payload.data(), payload.size());
  return XXH3_64bits_digest(&state);
}

}  // namespace

std::string encode_entry(std::string_view preimage, std::string_view payload) {
  std::string file(kEntryHeaderBytes, '\0');
  file.replace(0, kEntryMagic.size(), kEntryMagic);
  put_le(&file[8], kSchemaVersion, 4);
  put_le(&file[12], kEntryHeaderBytes, 4);
  put_le(&file[16], preimage.size(), 8);
  put_le(&file[24], payload.size(), 8);
  put_le(&file[32], checksum(preimage, payload), 8);
  file.reserve(kEntryHeaderBytes + preimage.size() + payload.size());
  file.append(preimage);
  file.append(payload);
  return file;
}

const char* to_string(EntryStatus status) {
  switch (status) {
    case EntryStatus::kOk:
      return "ok";
    case EntryStatus::kTruncated:
      return "truncated";
    case EntryStatus::kOversized:
      return "longer than its header says";
    case EntryStatus::kBadMagic:
      return "bad magic";
    case EntryStatus::kBadVersion:
      return "other format version";
    case EntryStatus::kBadChecksum:
      return "checksum mismatch";
    case EntryStatus::kNotElf:
      return "payload is not ELF";
  }
  return "unknown";
}

DecodedEntry decode_entry(std::string_view file) {
  DecodedEntry entry;
  if (file.size() < kEntryHeaderBytes) return {EntryStatus::kTruncated};
  if (file.substr(0, kEntryMagic.size()) != kEntryMagic) return {EntryStatus::kBadMagic};
  if (get_le(&file[8], 4) != kSchemaVersion || get_le(&file[12], 4) != kEntryHeaderBytes) {
    return {EntryStatus::kBadVersion};
  }
  const std::uint64_t preimage_size = get_le(&file[16], 8);
  const std::uint64_t payload_size = get_le(&file[24], 8);
  const std::uint64_t body = file.size() - kEntryHeaderBytes;
  // Compared one length at a time so that garbage lengths cannot overflow the sum.
  if (preimage_size > body || payload_size > body - preimage_size) {
    return {EntryStatus::kTruncated};
  }
  if (preimage_size + payload_size != body) return {EntryStatus::kOversized};
  entry.preimage = file.substr(kEntryHeaderBytes, preimage_size);
  entry.payload = file.substr(kEntryHeaderBytes + preimage_size);
  if (checksum(entry.preimage, entry.payload) != get_le(&file[32], 8)) {
    return {EntryStatus::kBadChecksum};
  }
  if (!is_elf(entry.payload)) return {EntryStatus::kNotElf};
  entry.status = EntryStatus::kOk;
  return entry;
}

}  // namespace rt_moe::cache
