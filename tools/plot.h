// rt_moe_bench --plot: the forward's measured time against its floor over the token counts, as a
// PNG. x: tokens per forward (log2 scale); y: milliseconds (log10 scale); each measured point is
// labelled with time/floor.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "canvas.h"

namespace rt_moe::tools {

struct PlotPoint {
  std::int64_t tokens = 0;
  double ms = 0;        // measured (median)
  double floor_ms = 0;  // max(FLOPs / GEMM rate, bytes / HBM bandwidth)
  double graph_ms = 0;  // replayed from a CUDA graph; 0: not measured, not drawn
};

inline constexpr int kPlotWidth = 900, kPlotHeight = 600;
// The plot area inside the image, in pixels: [left, right) x [top, bottom).
struct PlotFrame {
  int left, top, right, bottom;
};
inline constexpr PlotFrame kPlotFrame = {100, 64, kPlotWidth - 24, kPlotHeight - 72};

inline constexpr Rgb kTimeColor = {31, 119, 180};
inline constexpr Rgb kFloorColor = {214, 39, 40};
inline constexpr Rgb kGraphColor = {44, 160, 44};

// The plot as an image (kPlotWidth x kPlotHeight). Values that are not positive and finite are
// left out. Throws Error(kInvalidArgument) when no point has a positive token count and time.
Canvas render_time_vs_floor(const std::vector<PlotPoint>& points, const std::string& title);

// render_time_vs_floor() written as a PNG to `path`; throws Error(kIo) when it cannot be written.
void plot_time_vs_floor(const std::vector<PlotPoint>& points, const std::string& title,
                        const std::string& path);
// The same to a stream opened earlier (rt_moe_bench opens its --plot file before the run);
// `name` names it in the Error(kIo).
void plot_time_vs_floor(const std::vector<PlotPoint>& points, const std::string& title,
                        std::ostream& out, const std::string& name);

}  // namespace rt_moe::tools
