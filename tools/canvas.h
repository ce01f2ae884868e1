// A tiny RGB raster for the benchmark's plots: rectangles, antialiased thick lines, markers and
// text in a built-in 5x7 bitmap font (printable ASCII). Coordinates are pixels, y down; drawing
// outside the canvas is clipped.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace rt_moe::tools {

struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const Rgb&, const Rgb&) = default;
};

enum class Marker { kCircle, kSquare, kDiamond };

class Canvas {
 public:
  Canvas(int width, int height, Rgb background);

  int width() const { return width_; }
  int height() const { return height_; }
  Rgb pixel(int x, int y) const;
  // 3 bytes per pixel, rows top to bottom: what encode_png() takes.
  std::span<const std::uint8_t> rgb() const { return pixels_; }

  void fill_rect(int x, int y, int w, int h, Rgb color);
  // A segment `thickness` pixels wide with round ends, edges antialiased.
  void draw_line(double x0, double y0, double x1, double y1, double thickness, Rgb color);
  // A filled marker of `size` pixels across, centred on (x, y).
  void draw_marker(double x, double y, Marker shape, double size, Rgb color);
  // Text with its top-left corner at (x, y), each font pixel drawn as scale x scale pixels.
  // Characters outside printable ASCII are drawn as '?'.
  void draw_text(int x, int y, std::string_view text, int scale, Rgb color);

  static int text_width(std::string_view text, int scale);
  static int text_height(int scale);

 private:
  // Mixes `color` into the pixel with weight `coverage` in [0, 1].
  void blend(int x, int y, Rgb color, double coverage);

  int width_, height_;
  std::vector<std::uint8_t> pixels_;
};

}  // namespace rt_moe::tools
