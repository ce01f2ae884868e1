// A PNG encoder for RGB8 images with no dependency: the image data is a zlib stream of deflate
// *stored* blocks (no compression), which every PNG reader accepts. A benchmark plot is a couple
// of megabytes that way; being able to read the writer in one sitting is worth more.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <string_view>

namespace rt_moe::tools {

// CRC-32 (ISO 3309, reflected polynomial 0xEDB88320), as PNG chunks carry it.
std::uint32_t crc32(std::span<const std::uint8_t> bytes, std::uint32_t crc = 0);
std::uint32_t crc32(std::string_view bytes);

// Adler-32 (RFC 1950), the zlib stream's trailer.
std::uint32_t adler32(std::span<const std::uint8_t> bytes);
std::uint32_t adler32(std::string_view bytes);

// The PNG file of a width x height image, `rgb` holding 3 bytes per pixel, rows top to bottom.
// Throws Error(kInvalidArgument) when the sizes disagree or are not positive.
std::string encode_png(int width, int height, std::span<const std::uint8_t> rgb);

// encode_png() written to `out`; `name` (the file's path) names it in the Error(kIo) thrown
// when the stream fails.
void write_png(std::ostream& out, const std::string& name, int width, int height,
               std::span<const std::uint8_t> rgb);
// The same to a file, created or truncated.
void write_png(const std::string& path, int width, int height, std::span<const std::uint8_t> rgb);

}  // namespace rt_moe::tools
