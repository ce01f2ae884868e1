#include "png_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <ostream>

#include "rt_moe/error.h"

namespace rt_moe::tools {
namespace {

// A deflate stored block holds at most 65535 bytes: its length field is 16 bits.
constexpr std::size_t kMaxStoredBlock = 65535;

std::span<const std::uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

void put_u32_be(std::string& out, std::uint32_t v) {
  out.push_back(char(v >> 24));
  out.push_back(char(v >> 16));
  out.push_back(char(v >> 8));
  out.push_back(char(v));
}

void put_u16_le(std::string& out, std::uint32_t v) {
  out.push_back(char(v & 0xFF));
  out.push_back(char((v >> 8) & 0xFF));
}

// length, type, data, CRC-32 over type and data.
void put_chunk(std::string& out, std::string_view type, std::string_view data) {
  put_u32_be(out, std::uint32_t(data.size()));
  out.append(type);
  out.append(data);
  put_u32_be(out, crc32(as_bytes(data), crc32(type)));
}

}  // namespace

std::uint32_t crc32(std::span<const std::uint8_t> bytes, std::uint32_t crc) {
  static const std::array<std::uint32_t, 256> kTable = [] {
    std::array<std::uint32_t, 256> table{};
    for (std::uint32_t n = 0; n < 256; ++n) {
      std::uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[n] = c;
    }
    return table;
  }();
  // `crc` is a previous result: chaining calls equals one call over the concatenation.
  crc = ~crc;
  for (std::uint8_t b : bytes) crc = kTable[(crc ^ b) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::uint32_t crc32(std::string_view bytes) { return crc32(as_bytes(bytes)); }

std::uint32_t adler32(std::span<const std::uint8_t> bytes) {
  constexpr std::uint32_t kMod = 65521;
  // 5552 bytes is the most that can be summed before b can overflow 32 bits (zlib's NMAX).
  constexpr std::size_t kRun = 5552;
  std::uint32_t a = 1, b = 0;
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t end = std::min(bytes.size(), i + kRun);
    for (; i < end; ++i) {
      a += bytes[i];
      b += a;
    }
    a %= kMod;
    b %= kMod;
  }
  return (b << 16) | a;
}

std::uint32_t adler32(std::string_view bytes) { return adler32(as_bytes(bytes)); }

std::string encode_png(int width, int height, std::span<const std::uint8_t> rgb) {
  if (width <= 0 || height <= 0 || rgb.size() != std::size_t(width) * std::size_t(height) * 3) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("encode_png: a {}x{} RGB image needs {} bytes, got {}", width, height,
                            std::int64_t(width) * height * 3, rgb.size()));
  }
  // Each scanline is preceded by its filter type: 0 (None), so the bytes are the pixels.
  const std::size_t row_bytes = std::size_t(width) * 3;
  std::string raw;
  raw.reserve((row_bytes + 1) * std::size_t(height));
  for (int y = 0; y < height; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(rgb.data()) + std::size_t(y) * row_bytes, row_bytes);
  }

  // zlib: CMF 0x78 (deflate, 32 KiB window), FLG 0x01 (no dictionary, fastest; 0x7801 % 31 == 0),
  // then stored blocks: 1 byte BFINAL|BTYPE=00, LEN and ~LEN little-endian, the bytes; then the
  // Adler-32 of the uncompressed data, big-endian.
  std::string zlib = {char(0x78), char(0x01)};
  zlib.reserve(raw.size() + raw.size() / kMaxStoredBlock * 5 + 16);
  std::size_t offset = 0;
  do {
    const std::size_t n = std::min(kMaxStoredBlock, raw.size() - offset);
    const bool final = offset + n == raw.size();
    zlib.push_back(final ? char(1) : char(0));
    put_u16_le(zlib, std::uint32_t(n));
    put_u16_le(zlib, std::uint32_t(~n & 0xFFFF));
    zlib.append(raw, offset, n);
    offset += n;
  } while (offset < raw.size());
  put_u32_be(zlib, adler32(raw));

  std::string ihdr;
  put_u32_be(ihdr, std::uint32_t(width));
  put_u32_be(ihdr, std::uint32_t(height));
  // bit depth 8, colour type 2 (RGB), compression 0, filter 0, interlace 0 (none).
  ihdr.append({char(8), char(2), char(0), char(0), char(0)});

  std::string png = "\x89PNG\r\n\x1a\n";
  png.reserve(zlib.size() + 64);
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", zlib);
  put_chunk(png, "IEND", {});
  return png;
}

void write_png(std::ostream& out, const std::string& name, int width, int height,
               std::span<const std::uint8_t> rgb) {
  const std::string png = encode_png(width, height, rgb);
  out.write(png.data(), std::streamsize(png.size()));
  out.flush();
  if (!out) throw Error(ErrorCode::kIo, fmt::format("cannot write PNG '{}'", name));
}

void write_png(const std::string& path, int width, int height, std::span<const std::uint8_t> rgb) {
  const std::string png = encode_png(width, height, rgb);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(ErrorCode::kIo, fmt::format("cannot open '{}' for writing", path));
  out.write(png.data(), std::streamsize(png.size()));
  out.close();
  if (!out) throw Error(ErrorCode::kIo, fmt::format("cannot write PNG '{}'", path));
}

}  // namespace rt_moe::tools
