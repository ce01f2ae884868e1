#include "plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "png_writer.h"
#include "rt_moe/error.h"

namespace rt_moe::tools {
namespace {

constexpr Rgb kWhite = {255, 255, 255};
constexpr Rgb kText = {30, 30, 30};
constexpr Rgb kMuted = {105, 105, 105};
constexpr Rgb kFrameColor = {90, 90, 90};
constexpr Rgb kMajorGrid = {200, 200, 200};
constexpr Rgb kMinorGrid = {234, 234, 234};
constexpr int kScale = 2;  // font scale of every label: 10 x 14 pixel glyphs

struct Rect {
  int x, y, w, h;
  bool overlaps(const Rect& o) const {
    return x < o.x + o.w && o.x < x + w && y < o.y + o.h && o.y < y + h;
  }
  bool contains(double px, double py) const {
    return px >= x && px < x + w && py >= y && py < y + h;
  }
  bool inside(const PlotFrame& f) const {
    return x >= f.left && y >= f.top && x + w <= f.right && y + h <= f.bottom;
  }
};

bool usable(double v) { return std::isfinite(v) && v > 0; }

// Data to pixels: x = log2(tokens), y = log10(ms), each over a padded range.
struct Axes {
  double x_lo, x_hi, y_lo, y_hi;
  double px(double tokens) const {
    return kPlotFrame.left +
           (std::log2(tokens) - x_lo) / (x_hi - x_lo) * (kPlotFrame.right - kPlotFrame.left);
  }
  double py(double ms) const {
    return kPlotFrame.bottom -
           (std::log10(ms) - y_lo) / (y_hi - y_lo) * (kPlotFrame.bottom - kPlotFrame.top);
  }
};

Axes make_axes(const std::vector<PlotPoint>& points) {
  double t_lo = std::numeric_limits<double>::infinity(), t_hi = -t_lo;
  double v_lo = t_lo, v_hi = -t_lo;
  for (const PlotPoint& p : points) {
    t_lo = std::min(t_lo, double(p.tokens));
    t_hi = std::max(t_hi, double(p.tokens));
    for (double v : {p.ms, p.floor_ms, p.graph_ms}) {
      if (!usable(v)) continue;
      v_lo = std::min(v_lo, v);
      v_hi = std::max(v_hi, v);
    }
  }
  Axes axes;
  // Padding keeps the markers and their labels off the frame; a single token count (or a single
  // value) still gets a range to sit in.
  const double x_span = std::log2(t_hi) - std::log2(t_lo);
  const double x_pad = x_span > 0 ? 0.05 * x_span + 0.3 : 1.0;
  axes.x_lo = std::log2(t_lo) - x_pad;
  axes.x_hi = std::log2(t_hi) + x_pad;
  double y_lo = std::log10(v_lo), y_hi = std::log10(v_hi);
  if (y_hi - y_lo < 0.4) {
    const double mid = (y_lo + y_hi) / 2;
    y_lo = mid - 0.2;
    y_hi = mid + 0.2;
  }
  const double y_span = y_hi - y_lo;
  axes.y_lo = y_lo - 0.08 * y_span;
  axes.y_hi = y_hi + 0.14 * y_span;  // room for the time/floor labels above the top point
  return axes;
}

// "0.001", "0.02", "5", "1000": ticks are m * 10^d, so %g prints them exactly enough.
std::string tick_label(double v) { return fmt::format("{:g}", v); }

void draw_y_grid(Canvas& canvas, const Axes& axes) {
  // Decades only, 1-2-5, or every tick: as many labels as fit with room between them (2 sits
  // 0.3 decade above 1; 9 sits 0.05 decade below 10).
  const double per_decade = (kPlotFrame.bottom - kPlotFrame.top) / (axes.y_hi - axes.y_lo);
  const auto labelled = [per_decade](int m) {
    return m == 1 || (per_decade >= 110 && (m == 2 || m == 5)) || per_decade >= 450;
  };
  int last_label_top = std::numeric_limits<int>::max();
  for (int d = int(std::floor(axes.y_lo)); d <= int(std::ceil(axes.y_hi)); ++d) {
    for (int m = 1; m <= 9; ++m) {
      const double v = m * std::pow(10.0, d);
      const double lv = std::log10(v);
      if (lv < axes.y_lo || lv > axes.y_hi) continue;
      const int y = int(std::lround(axes.py(v)));
      canvas.fill_rect(kPlotFrame.left, y, kPlotFrame.right - kPlotFrame.left, 1,
                       m == 1 ? kMajorGrid : kMinorGrid);
      if (!labelled(m)) continue;
      const std::string label = tick_label(v);
      const int top = y - Canvas::text_height(kScale) / 2;
      if (top + Canvas::text_height(kScale) + 4 > last_label_top) continue;  // too close
      canvas.fill_rect(kPlotFrame.left - 5, y, 5, 1, kFrameColor);
      canvas.draw_text(kPlotFrame.left - 9 - Canvas::text_width(label, kScale), top, label, kScale,
                       kText);
      last_label_top = top;
    }
  }
}

void draw_x_grid(Canvas& canvas, const Axes& axes, const std::vector<PlotPoint>& points) {
  // Small ticks at the powers of two; a gridline and a label at each measured token count.
  for (int e = int(std::ceil(axes.x_lo)); e <= int(std::floor(axes.x_hi)); ++e) {
    if (e < 0) continue;
    const int x = int(std::lround(axes.px(std::ldexp(1.0, e))));
    canvas.fill_rect(x, kPlotFrame.bottom, 1, 4, kFrameColor);
  }
  int last_label_right = std::numeric_limits<int>::min();
  for (const PlotPoint& p : points) {
    const int x = int(std::lround(axes.px(double(p.tokens))));
    canvas.fill_rect(x, kPlotFrame.top, 1, kPlotFrame.bottom - kPlotFrame.top, kMajorGrid);
    const std::string label = std::to_string(p.tokens);
    const int left = x - Canvas::text_width(label, kScale) / 2;
    if (left < last_label_right + 10) continue;  // would touch the previous label
    canvas.fill_rect(x, kPlotFrame.bottom, 1, 7, kFrameColor);
    canvas.draw_text(left, kPlotFrame.bottom + 11, label, kScale, kText);
    last_label_right = left + Canvas::text_width(label, kScale);
  }
}

struct Series {
  std::string label;
  Rgb color;
  double thickness;
  bool dashed;
  Marker marker;
  double marker_size;
  std::vector<std::pair<double, double>> xy;  // pixels, in token order
};

void draw_polyline(Canvas& canvas, const Series& s) {
  constexpr double kDash = 11, kGap = 7;
  double phase = 0;  // distance into the current dash + gap period, carried across vertices
  for (std::size_t i = 1; i < s.xy.size(); ++i) {
    const auto [x0, y0] = s.xy[i - 1];
    const auto [x1, y1] = s.xy[i];
    const double length = std::hypot(x1 - x0, y1 - y0);
    if (!s.dashed || length == 0) {
      canvas.draw_line(x0, y0, x1, y1, s.thickness, s.color);
      continue;
    }
    for (double at = 0; at < length;) {
      const bool on = phase < kDash;
      const double step = std::min(length - at, on ? kDash - phase : kDash + kGap - phase);
      if (on) {
        const double a = at / length, b = (at + step) / length;
        canvas.draw_line(x0 + a * (x1 - x0), y0 + a * (y1 - y0), x0 + b * (x1 - x0),
                         y0 + b * (y1 - y0), s.thickness, s.color);
      }
      at += step;
      phase = std::fmod(phase + step, kDash + kGap);
    }
  }
}

void draw_markers(Canvas& canvas, const Series& s) {
  for (const auto& [x, y] : s.xy) {
    canvas.draw_marker(x, y, s.marker, s.marker_size + 4, kWhite);  // a halo over the lines
    canvas.draw_marker(x, y, s.marker, s.marker_size, s.color);
  }
}

std::string ratio_label(double ratio) {
  if (ratio >= 99.5) return fmt::format("{:.0f}x", ratio);
  if (ratio >= 9.995) return fmt::format("{:.1f}x", ratio);
  return fmt::format("{:.2f}x", ratio);
}

// Points every few pixels along each series' lines, its vertices counted five times over: what a
// label or the legend would hide if placed over them.
using Ink = std::vector<std::pair<double, double>>;
Ink trace(const std::vector<Series>& series) {
  Ink ink;
  for (const Series& s : series) {
    for (std::size_t i = 0; i < s.xy.size(); ++i) {
      const auto [x1, y1] = s.xy[i];
      ink.insert(ink.end(), 5, s.xy[i]);
      if (i == 0) continue;
      const auto [x0, y0] = s.xy[i - 1];
      const int steps = 1 + int(std::hypot(x1 - x0, y1 - y0) / 3);
      for (int k = 1; k < steps; ++k) {
        const double t = double(k) / steps;
        ink.emplace_back(x0 + t * (x1 - x0), y0 + t * (y1 - y0));
      }
    }
  }
  return ink;
}

int hidden_ink(const Rect& rect, int margin, const Ink& ink) {
  const Rect grown = {rect.x - margin, rect.y - margin, rect.w + 2 * margin, rect.h + 2 * margin};
  return int(std::count_if(ink.begin(), ink.end(),
                           [&grown](const auto& p) { return grown.contains(p.first, p.second); }));
}

// time/floor next to each measured point: of the places around it (above first), the one that
// hides the least of the lines, never over another label and inside the frame if any place allows.
std::vector<Rect> draw_ratio_labels(Canvas& canvas, const Axes& axes,
                                    const std::vector<PlotPoint>& points, const Ink& ink) {
  constexpr int kGap = 8, kBlocked = 1000;
  std::vector<Rect> placed;
  for (const PlotPoint& p : points) {
    if (!usable(p.ms) || !usable(p.floor_ms)) continue;
    const std::string label = ratio_label(p.ms / p.floor_ms);
    const int w = Canvas::text_width(label, kScale), h = Canvas::text_height(kScale);
    const int x = int(std::lround(axes.px(double(p.tokens))));
    const int y = int(std::lround(axes.py(p.ms)));
    const Rect candidates[] = {
        {x - w / 2, y - kGap - h, w, h},     {x - kGap - w, y - kGap - h, w, h},
        {x + kGap, y - kGap - h, w, h},      {x - w / 2, y + kGap, w, h},
        {x + kGap, y + kGap, w, h},          {x - kGap - w, y + kGap, w, h},
        {x - kGap - 4 - w, y - h / 2, w, h}, {x + kGap + 4, y - h / 2, w, h}};
    Rect chosen = candidates[0];
    int best = std::numeric_limits<int>::max();
    for (int i = 0; i < int(std::size(candidates)); ++i) {
      const Rect& c = candidates[i];
      int cost = i + 4 * hidden_ink(c, 3, ink);
      if (!c.inside(kPlotFrame)) cost += kBlocked;
      for (const Rect& r : placed) cost += r.overlaps(c) ? kBlocked : 0;
      if (cost < best) {
        best = cost;
        chosen = c;
      }
    }
    canvas.fill_rect(chosen.x - 2, chosen.y - 2, chosen.w + 4, chosen.h + 4, kWhite);
    canvas.draw_text(chosen.x, chosen.y, label, kScale, kText);
    placed.push_back(chosen);
  }
  return placed;
}

// The legend goes into the corner of the plot area that hides the least of the data.
void draw_legend(Canvas& canvas, const std::vector<Series>& series, const Ink& ink,
                 const std::vector<Rect>& labels) {
  const std::string note = "labels: time/floor";
  int text_w = Canvas::text_width(note, kScale);
  for (const Series& s : series) text_w = std::max(text_w, Canvas::text_width(s.label, kScale));
  constexpr int kPad = 10, kSample = 36, kRow = 24, kInset = 12;
  const int w = kPad + kSample + 10 + text_w + kPad;
  const int h = kPad + kRow * int(series.size() + 1) - (kRow - Canvas::text_height(kScale)) + kPad;
  const PlotFrame& f = kPlotFrame;
  const Rect corners[] = {{f.left + kInset, f.top + kInset, w, h},
                          {f.right - kInset - w, f.bottom - kInset - h, w, h},
                          {f.right - kInset - w, f.top + kInset, w, h},
                          {f.left + kInset, f.bottom - kInset - h, w, h}};
  Rect best = corners[0];
  int best_hidden = std::numeric_limits<int>::max();
  for (const Rect& corner : corners) {
    int hidden = hidden_ink(corner, 8, ink);
    for (const Rect& label : labels) hidden += corner.overlaps(label) ? 50 : 0;
    if (hidden < best_hidden) {
      best_hidden = hidden;
      best = corner;
    }
  }

  canvas.fill_rect(best.x - 1, best.y - 1, best.w + 2, best.h + 2, kFrameColor);
  canvas.fill_rect(best.x, best.y, best.w, best.h, kWhite);
  int y = best.y + kPad;
  const int mid = Canvas::text_height(kScale) / 2;
  for (const Series& s : series) {
    const int x0 = best.x + kPad, x1 = x0 + kSample;
    Series sample = s;
    sample.xy = {{x0 + 2, y + mid}, {x1 - 2, y + mid}};
    draw_polyline(canvas, sample);
    sample.xy = {{(x0 + x1) / 2.0, y + mid}};
    draw_markers(canvas, sample);
    canvas.draw_text(x1 + 10, y, s.label, kScale, kText);
    y += kRow;
  }
  canvas.draw_text(best.x + kPad, y, note, kScale, kMuted);
}

}  // namespace

Canvas render_time_vs_floor(const std::vector<PlotPoint>& input, const std::string& title) {
  std::vector<PlotPoint> points;
  for (const PlotPoint& p : input) {
    if (p.tokens > 0 && usable(p.ms)) points.push_back(p);
  }
  if (points.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "plot: no point with a positive token count and a positive time");
  }
  std::sort(points.begin(), points.end(),
            [](const PlotPoint& a, const PlotPoint& b) { return a.tokens < b.tokens; });
  const Axes axes = make_axes(points);

  std::vector<Series> series = {
      {"measured (median)", kTimeColor, 3.0, false, Marker::kCircle, 10, {}},
      {"floor", kFloorColor, 2.5, true, Marker::kSquare, 8, {}},
      {"CUDA graph replay", kGraphColor, 2.0, false, Marker::kDiamond, 9, {}}};
  for (const PlotPoint& p : points) {
    const double x = axes.px(double(p.tokens));
    series[0].xy.emplace_back(x, axes.py(p.ms));
    if (usable(p.floor_ms)) series[1].xy.emplace_back(x, axes.py(p.floor_ms));
    if (usable(p.graph_ms)) series[2].xy.emplace_back(x, axes.py(p.graph_ms));
  }
  std::erase_if(series, [](const Series& s) { return s.xy.empty(); });

  Canvas canvas(kPlotWidth, kPlotHeight, kWhite);
  draw_y_grid(canvas, axes);
  draw_x_grid(canvas, axes, points);
  // The measured time last, on top: it is what the plot is about.
  for (auto it = series.rbegin(); it != series.rend(); ++it) draw_polyline(canvas, *it);
  for (auto it = series.rbegin(); it != series.rend(); ++it) draw_markers(canvas, *it);
  const Ink ink = trace(series);
  const std::vector<Rect> labels = draw_ratio_labels(canvas, axes, points, ink);
  draw_legend(canvas, series, ink, labels);

  // The frame, drawn last so that no line's antialiased edge frays it.
  const PlotFrame& f = kPlotFrame;
  canvas.fill_rect(f.left - 1, f.top - 1, f.right - f.left + 2, 1, kFrameColor);
  canvas.fill_rect(f.left - 1, f.bottom, f.right - f.left + 2, 1, kFrameColor);
  canvas.fill_rect(f.left - 1, f.top - 1, 1, f.bottom - f.top + 2, kFrameColor);
  canvas.fill_rect(f.right, f.top - 1, 1, f.bottom - f.top + 2, kFrameColor);

  const int title_scale = Canvas::text_width(title, kScale) <= kPlotWidth - 24 ? kScale : 1;
  canvas.draw_text((kPlotWidth - Canvas::text_width(title, title_scale)) / 2, 14, title,
                   title_scale, kText);
  const std::string y_title = "time, ms (log10)";
  canvas.draw_text(12, f.top - 10 - Canvas::text_height(kScale), y_title, kScale, kMuted);
  const std::string x_title = "tokens per forward (log2)";
  canvas.draw_text((f.left + f.right - Canvas::text_width(x_title, kScale)) / 2, f.bottom + 40,
                   x_title, kScale, kMuted);
  return canvas;
}

void plot_time_vs_floor(const std::vector<PlotPoint>& points, const std::string& title,
                        const std::string& path) {
  const Canvas canvas = render_time_vs_floor(points, title);
  write_png(path, canvas.width(), canvas.height(), canvas.rgb());
}

void plot_time_vs_floor(const std::vector<PlotPoint>& points, const std::string& title,
                        std::ostream& out, const std::string& name) {
  const Canvas canvas = render_time_vs_floor(points, title);
  write_png(out, name, canvas.width(), canvas.height(), canvas.rgb());
}

}  // namespace rt_moe::tools
