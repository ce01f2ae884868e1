// libFuzzer target for the cache entry parser (cache/entry.h): any bytes a cache file can hold.
//
// decode_entry() must never read outside the file, and may say kOk only for a file that is
// exactly header + preimage + payload with an ELF payload, whose views lie inside the file and
// re-encode to the same bytes. The input is also split into a preimage and a payload that are
// encoded and decoded again (a round trip must give them back), so that the fuzzer reaches the
// checks behind the checksum too.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "entry.h"

namespace {

using rt_moe::cache::decode_entry;
using rt_moe::cache::DecodedEntry;
using rt_moe::cache::encode_entry;
using rt_moe::cache::EntryStatus;
using rt_moe::cache::is_elf;
using rt_moe::cache::kEntryHeaderBytes;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_cache_entry: broken invariant: %s\n", what);
    std::abort();
  }
}

bool inside(std::string_view part, std::string_view whole) {
  return part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size();
}

void check_decoded(std::string_view file, const DecodedEntry& entry) {
  check(rt_moe::cache::to_string(entry.status) != nullptr, "status has a name");
  if (entry.status != EntryStatus::kOk) return;
  check(inside(entry.preimage, file) && inside(entry.payload, file), "views inside the file");
  check(kEntryHeaderBytes + entry.preimage.size() + entry.payload.size() == file.size(),
        "size is header + preimage + payload");
  check(is_elf(entry.payload), "payload is ELF");
  check(encode_entry(entry.preimage, entry.payload) == file, "a valid entry re-encodes to itself");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string file(reinterpret_cast<const char*>(data), size);  // an exact-size heap copy
  check_decoded(file, decode_entry(file));

  // Round trip: the first byte says where the preimage ends.
  if (size > 0) {
    const std::string_view rest(file.data() + 1, size - 1);
    const std::size_t split = static_cast<unsigned char>(file[0]) % (rest.size() + 1);
    const std::string_view preimage = rest.substr(0, split);
    const std::string_view payload = rest.substr(split);
    const std::string encoded = encode_entry(preimage, payload);
    const DecodedEntry entry = decode_entry(encoded);
    check_decoded(encoded, entry);
    if (is_elf(payload)) {
      check(entry.status == EntryStatus::kOk, "an encoded ELF payload decodes");
      check(entry.preimage == preimage && entry.payload == payload, "round trip");
    } else {
      check(entry.status == EntryStatus::kNotElf, "a non-ELF payload is kNotElf");
    }
    // Any shorter prefix of a valid entry is truncated, never accepted.
    if (entry.status == EntryStatus::kOk && !encoded.empty()) {
      const std::size_t cut = static_cast<unsigned char>(file[0]) % encoded.size();
      check(decode_entry(std::string(encoded, 0, cut)).status == EntryStatus::kTruncated,
            "a prefix is truncated");
    }
  }
  return 0;
}
