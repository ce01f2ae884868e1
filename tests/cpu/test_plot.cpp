// rt_moe_bench --plot without a GPU: the PNG writer's output parses back (signature, chunk CRCs,
// IHDR, the stored-deflate zlib stream and its Adler-32, every pixel), the canvas draws where it
// is asked, and plot_time_vs_floor() writes a 900x600 PNG whose plot area holds the time and
// floor lines. The decoder here is written from the PNG and zlib specifications, apart from the
// writer, so that the two cannot share a mistake.
#ifdef RT_MOE_TOOLS_DIR  // the plot library is built with the tools

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "canvas.h"
#include "plot.h"
#include "png_writer.h"
#include "rt_moe/error.h"
#include "test_util.h"

namespace rt_moe::tools {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Bit at a time, straight from the definition (the writer uses a table).
std::uint32_t slow_crc32(std::string_view bytes) {
  std::uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1)));
  }
  return ~crc;
}

std::uint32_t slow_adler32(std::string_view bytes) {
  std::uint32_t a = 1, b = 0;
  for (unsigned char c : bytes) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

std::uint32_t be32(std::string_view s, std::size_t at) {
  return std::uint32_t(std::uint8_t(s[at])) << 24 | std::uint32_t(std::uint8_t(s[at + 1])) << 16 |
         std::uint32_t(std::uint8_t(s[at + 2])) << 8 | std::uint32_t(std::uint8_t(s[at + 3]));
}

std::uint32_t le16(std::string_view s, std::size_t at) {
  return std::uint32_t(std::uint8_t(s[at])) | std::uint32_t(std::uint8_t(s[at + 1])) << 8;
}

struct DecodedPng {
  std::uint32_t width = 0, height = 0;
  std::vector<std::string> chunk_types;
  std::vector<std::uint32_t> stored_block_sizes;
  std::vector<std::uint8_t> rgb;  // 3 bytes a pixel, rows top to bottom
};

// Decodes the PNGs the writer makes (RGB8, no interlace, zlib of stored blocks, filter 0),
// REQUIRE-ing every field and checksum on the way.
DecodedPng decode_png(const std::string& png) {
  DecodedPng out;
  REQUIRE(png.size() >= 8);
  REQUIRE(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  std::string zlib;
  std::size_t at = 8;
  while (at < png.size()) {
    REQUIRE(at + 12 <= png.size());
    const std::uint32_t length = be32(png, at);
    REQUIRE(at + 12 + length <= png.size());
    const std::string type = png.substr(at + 4, 4);
    const std::string_view type_and_data = std::string_view(png).substr(at + 4, 4 + length);
    INFO("chunk " << type);
    REQUIRE(be32(png, at + 8 + length) == slow_crc32(type_and_data));
    const std::string data = png.substr(at + 8, length);
    if (type == "IHDR") {
      REQUIRE(out.chunk_types.empty());  // IHDR comes first
      REQUIRE(length == 13);
      out.width = be32(data, 0);
      out.height = be32(data, 4);
      CHECK(int(data[8]) == 8);   // bit depth
      CHECK(int(data[9]) == 2);   // colour type: RGB
      CHECK(int(data[10]) == 0);  // compression: deflate
      CHECK(int(data[11]) == 0);  // filter method 0
      CHECK(int(data[12]) == 0);  // no interlace
    } else if (type == "IDAT") {
      zlib += data;
    }
    out.chunk_types.push_back(type);
    at += 12 + length;
  }
  REQUIRE(at == png.size());
  REQUIRE(out.chunk_types.size() >= 3);
  REQUIRE(out.chunk_types.front() == "IHDR");
  REQUIRE(out.chunk_types.back() == "IEND");

  // zlib header: deflate with a window of at most 32 KiB, no preset dictionary, check bits.
  REQUIRE(zlib.size() >= 2 + 5 + 4);
  const std::uint32_t cmf = std::uint8_t(zlib[0]), flg = std::uint8_t(zlib[1]);
  CHECK((cmf & 0x0F) == 8);
  CHECK((cmf >> 4) <= 7);
  CHECK((flg & 0x20) == 0);
  CHECK((cmf * 256 + flg) % 31 == 0);
  std::string raw;
  std::size_t z = 2;
  for (bool final = false; !final;) {
    REQUIRE(z + 5 <= zlib.size());
    const std::uint8_t header = std::uint8_t(zlib[z]);
    final = header & 1;
    REQUIRE(((header >> 1) & 3) == 0);  // BTYPE 00: stored
    const std::uint32_t len = le16(zlib, z + 1), nlen = le16(zlib, z + 3);
    REQUIRE(len == (~nlen & 0xFFFF));
    REQUIRE(z + 5 + len <= zlib.size());
    raw.append(zlib, z + 5, len);
    out.stored_block_sizes.push_back(len);
    z += 5 + len;
  }
  REQUIRE(z + 4 == zlib.size());
  CHECK(be32(zlib, z) == slow_adler32(raw));

  const std::size_t row = std::size_t(out.width) * 3;
  REQUIRE(raw.size() == (row + 1) * out.height);
  for (std::uint32_t y = 0; y < out.height; ++y) {
    REQUIRE(raw[y * (row + 1)] == 0);  // filter type None
    const char* begin = raw.data() + y * (row + 1) + 1;
    out.rgb.insert(out.rgb.end(), begin, begin + row);
  }
  return out;
}

std::size_t count_pixels(const DecodedPng& png, const PlotFrame& area, bool (*match)(Rgb)) {
  std::size_t n = 0;
  for (int y = area.top; y < area.bottom; ++y) {
    for (int x = area.left; x < area.right; ++x) {
      const std::uint8_t* p = &png.rgb[(std::size_t(y) * png.width + x) * 3];
      n += match({p[0], p[1], p[2]});
    }
  }
  return n;
}

const std::vector<PlotPoint> kPoints = {{1, 0.095, 0.062, 0.071}, {8, 0.31, 0.21, 0.29},
                                        {64, 1.35, 0.98, 1.30},   {512, 3.1, 2.05, 3.05},
                                        {4096, 6.2, 4.1, 6.1},    {16384, 21.5, 15.8, 21.4}};

}  // namespace

TEST_CASE("png: CRC-32 and Adler-32 of known strings", "[plot]") {
  CHECK(crc32("123456789") == 0xCBF43926u);
  CHECK(crc32("") == 0u);
  CHECK(crc32("IEND") == 0xAE426082u);  // the CRC every PNG ends with
  CHECK(adler32("Wikipedia") == 0x11E60398u);
  CHECK(adler32("") == 1u);
  // Long enough for the writer's deferred modulo to matter: it must agree with the slow one.
  std::string long_input(200000, '\xFF');
  CHECK(adler32(long_input) == slow_adler32(long_input));
  CHECK(crc32(long_input) == slow_crc32(long_input));
}

TEST_CASE("png: a small image parses back: signature, chunk CRCs, IHDR, every pixel", "[plot]") {
  const int width = 7, height = 5;
  std::vector<std::uint8_t> rgb(width * height * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = std::uint8_t(i * 37 + 11);
  const DecodedPng png = decode_png(encode_png(width, height, rgb));
  CHECK(png.width == 7);
  CHECK(png.height == 5);
  CHECK(png.chunk_types == std::vector<std::string>{"IHDR", "IDAT", "IEND"});
  CHECK(png.stored_block_sizes == std::vector<std::uint32_t>{5 * (7 * 3 + 1)});
  CHECK(png.rgb == rgb);
}

TEST_CASE("png: image data over 65535 bytes is split into stored blocks and the file reads back",
          "[plot]") {
  const int width = 211, height = 157;  // 157 rows of 634 bytes: 99538 bytes, two blocks
  std::vector<std::uint8_t> rgb(width * height * 3);
  std::mt19937 rng(7);
  for (std::uint8_t& b : rgb) b = std::uint8_t(rng());
  TempDir dir;
  const fs::path path = dir.path() / "noise.png";
  write_png(path.string(), width, height, rgb);
  const DecodedPng png = decode_png(read_file(path));
  CHECK(png.width == 211);
  CHECK(png.height == 157);
  CHECK(png.stored_block_sizes == std::vector<std::uint32_t>{65535, 99538 - 65535});
  CHECK(png.rgb == rgb);
}

TEST_CASE("png: wrong sizes throw kInvalidArgument and an unwritable path throws kIo", "[plot]") {
  std::vector<std::uint8_t> rgb(4 * 3);
  CHECK_THROWS_MATCHES(encode_png(2, 3, rgb), Error, Catch::Predicate<Error>([](const Error& e) {
                         return e.code() == ErrorCode::kInvalidArgument;
                       }));
  CHECK_THROWS_AS(encode_png(0, 0, {}), Error);
  const auto is_io =
      Catch::Predicate<Error>([](const Error& e) { return e.code() == ErrorCode::kIo; });
  CHECK_THROWS_MATCHES(write_png("/nonexistent/rt_moe/out.png", 2, 2, rgb), Error, is_io);
  TempDir dir;  // a directory is not a file either
  CHECK_THROWS_MATCHES(write_png(dir.path().string(), 2, 2, rgb), Error, is_io);
}

TEST_CASE("canvas: rectangles, lines, markers and text land where asked, clipped at the edges",
          "[plot]") {
  const Rgb white = {255, 255, 255}, ink = {10, 20, 30};
  Canvas canvas(40, 30, white);
  canvas.fill_rect(-5, -5, 8, 7, ink);  // clipped to [0, 3) x [0, 2)
  CHECK(canvas.pixel(2, 1) == ink);
  CHECK(canvas.pixel(3, 1) == white);
  CHECK(canvas.pixel(2, 2) == white);

  canvas.draw_line(5, 10.5, 35, 10.5, 3, ink);  // the core rows 9..11 solid, 7 and 13 untouched
  for (int x = 6; x < 35; ++x) {
    INFO("x = " << x);
    CHECK(canvas.pixel(x, 10) == ink);
    CHECK(canvas.pixel(x, 9) == ink);
    CHECK(canvas.pixel(x, 11) == ink);
    CHECK(canvas.pixel(x, 7) == white);
    CHECK(canvas.pixel(x, 13) == white);
  }
  canvas.draw_line(-100, -100, 100, 100, 2, ink);  // far outside: clipped, no crash
  canvas.draw_marker(20, 22, Marker::kCircle, 6, ink);
  CHECK(canvas.pixel(20, 22) == ink);
  CHECK(canvas.pixel(19, 21) == ink);

  // '.' is a 2 x 2 dot in the font's bottom rows (5 and 6), columns 1 and 2.
  Canvas text(20, 10, white);
  text.draw_text(3, 1, ".", 1, ink);
  for (int y = 0; y < 10; ++y) {
    for (int x = 0; x < 20; ++x) {
      INFO("(" << x << ", " << y << ")");
      CHECK((text.pixel(x, y) == ink) == (x >= 4 && x <= 5 && y >= 6 && y <= 7));
    }
  }
  CHECK(Canvas::text_width("1.42x", 1) == 29);  // 5 glyphs of 5 columns, 4 gaps
  CHECK(Canvas::text_width("1.42x", 2) == 58);
  CHECK(Canvas::text_height(2) == 14);
}

TEST_CASE("plot: plot_time_vs_floor writes a 900x600 PNG with the lines in the plot area",
          "[plot]") {
  TempDir dir;
  const fs::path path = dir.path() / "plot.png";
  plot_time_vs_floor(kPoints, "deepseek-v3, bf16, NVIDIA H200: forward time vs floor",
                     path.string());
  const DecodedPng png = decode_png(read_file(path));
  REQUIRE(png.width == std::uint32_t(kPlotWidth));
  REQUIRE(png.height == std::uint32_t(kPlotHeight));
  REQUIRE(png.width == 900);
  REQUIRE(png.height == 600);

  // The lines' cores and the markers are drawn in their colours exactly.
  const auto time = count_pixels(png, kPlotFrame, [](Rgb c) { return c == kTimeColor; });
  const auto floor = count_pixels(png, kPlotFrame, [](Rgb c) { return c == kFloorColor; });
  const auto graph = count_pixels(png, kPlotFrame, [](Rgb c) { return c == kGraphColor; });
  const auto ink = count_pixels(png, kPlotFrame, [](Rgb c) { return !(c == Rgb{255, 255, 255}); });
  CHECK(time > 1000);
  CHECK(floor > 500);
  CHECK(graph > 50);
  CHECK(ink > time + floor + graph);
  // Nothing is drawn in the image's corners, outside the frame and its labels.
  CHECK(png.rgb[0] == 255);
  CHECK(png.rgb[png.rgb.size() - 1] == 255);
}

TEST_CASE("plot: one token count plots, graph time 0 is left out, bad input and paths throw",
          "[plot]") {
  TempDir dir;
  const fs::path path = dir.path() / "one.png";
  plot_time_vs_floor({{64, 0.52, 0.37, 0}}, "tiny, fp16, NVIDIA H200", path.string());
  const DecodedPng png = decode_png(read_file(path));
  CHECK(png.width == 900);
  CHECK(png.height == 600);
  CHECK(count_pixels(png, kPlotFrame, [](Rgb c) { return c == kTimeColor; }) > 20);
  CHECK(count_pixels(png, kPlotFrame, [](Rgb c) { return c == kFloorColor; }) > 20);
  // The legend draws a sample of each series it lists: no graph time, no green anywhere.
  CHECK(count_pixels(png, {0, 0, kPlotWidth, kPlotHeight},
                     [](Rgb c) { return c == kGraphColor; }) == 0);

  CHECK_THROWS_MATCHES(plot_time_vs_floor({}, "empty", (dir.path() / "e.png").string()), Error,
                       Catch::Predicate<Error>(
                           [](const Error& e) { return e.code() == ErrorCode::kInvalidArgument; }));
  CHECK_THROWS_AS(plot_time_vs_floor({{0, 1.0, 1.0, 0}, {8, -1.0, 1.0, 0}}, "no usable point",
                                     (dir.path() / "n.png").string()),
                  Error);
  CHECK_THROWS_MATCHES(
      plot_time_vs_floor(kPoints, "unwritable", "/nonexistent/rt_moe/plot.png"), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == ErrorCode::kIo; }));
}

}  // namespace rt_moe::tools

#endif  // RT_MOE_TOOLS_DIR
