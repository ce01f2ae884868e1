#include "cubin_info.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace rt_moe {

namespace {

// .nv.info entries: a format byte, an attribute byte, then by format: EIFMT_NVAL no value,
// EIFMT_BVAL one byte, EIFMT_HVAL two, EIFMT_SVAL a 16-bit size and that many bytes (for the
// per-kernel attributes below: the kernel's symbol index, then the value).
constexpr std::uint8_t kFmtNval = 1, kFmtBval = 2, kFmtHval = 3, kFmtSval = 4;
constexpr std::uint8_t kFrameSize = 0x11, kMinStackSize = 0x12, kRegCount = 0x2f;

// The little-endian T at `at`, if it lies inside `bytes`.
template <typename T>
bool read(std::string_view bytes, std::uint64_t at, T& value) {
  if (at > bytes.size() || bytes.size() - at < sizeof(T)) return false;
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  return true;
}

}  // namespace

std::optional<CubinResources> cubin_resources(std::string_view elf) {
  // ELF64, little-endian: the section header table's offset, entry size, count, and the index of
  // the section that holds the section names.
  if (elf.size() < 64 ||
      elf.compare(0, 4,
                  "\x7f"
                  "ELF") != 0 ||
      elf[4] != 2 || elf[5] != 1) {
    return std::nullopt;
  }
  std::uint64_t shoff = 0;
  std::uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
  if (!read(elf, 0x28, shoff) || !read(elf, 0x3a, shentsize) || !read(elf, 0x3c, shnum) ||
      !read(elf, 0x3e, shstrndx) || shentsize < 64 || shstrndx >= shnum) {
    return std::nullopt;
  }
  auto section = [&](std::uint16_t index, std::uint32_t& name, std::uint64_t& offset,
                     std::uint64_t& size) {
    const std::uint64_t header = shoff + std::uint64_t(index) * shentsize;
    return read(elf, header, name) && read(elf, header + 0x18, offset) &&
           read(elf, header + 0x20, size) && offset <= elf.size() && elf.size() - offset >= size;
  };
  std::uint32_t unused = 0;
  std::uint64_t names = 0, names_size = 0;
  if (!section(shstrndx, unused, names, names_size)) return std::nullopt;
  const std::string_view wanted(".nv.info\0", 9);  // the name and its terminator
  for (std::uint16_t i = 0; i < shnum; ++i) {
    std::uint32_t name = 0;
    std::uint64_t offset = 0, size = 0;
    if (!section(i, name, offset, size)) return std::nullopt;
    if (name >= names_size || names_size - name < wanted.size() ||
        elf.substr(names + name, wanted.size()) != wanted) {
      continue;
    }
    const std::string_view info = elf.substr(offset, size);
    CubinResources resources;
    bool registers = false;
    for (std::uint64_t at = 0; at + 2 <= info.size();) {
      const auto format = std::uint8_t(info[at]), attribute = std::uint8_t(info[at + 1]);
      if (format == kFmtSval) {
        std::uint16_t bytes = 0;
        std::uint32_t value = 0;
        if (!read(info, at + 2, bytes)) break;
        if (bytes >= 8 && read(info, at + 8, value)) {
          if (attribute == kRegCount && !registers) {
            resources.registers = int(value);
            registers = true;
          }
          if (attribute == kFrameSize)
            resources.frame_bytes = std::max(resources.frame_bytes, int(value));
          if (attribute == kMinStackSize)
            resources.stack_bytes = std::max(resources.stack_bytes, int(value));
        }
        at += 4 + std::uint64_t(bytes);
      } else if (format == kFmtHval || format == kFmtBval) {
        at += 4;
      } else if (format == kFmtNval) {
        at += 2;
      } else {
        break;  // an unknown format: its length is unknown
      }
    }
    if (registers) return resources;
  }
  return std::nullopt;
}

}  // namespace rt_moe
