// SvgPlot: line charts as standalone SVG, written here (no plotting library): panels
// stacked one above the other, each with axes, "nice" ticks, a legend, one line per
// series and, where a series has one, a shaded band (the spread over seeds). A NaN breaks
// a line. Text is XML-escaped. For `gpupool sim saturation --plot` and `sim timed --plot`.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace gpupool::sim {

struct PlotSeries {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;
  // Optional band around the line (both empty, or both as long as x).
  std::vector<double> low;
  std::vector<double> high;
};

struct PlotPanel {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<PlotSeries> series;
  std::optional<double> y_min;  // else from the data (and its bands)
  std::optional<double> y_max;
};

// The chart: `title` on top, then the panels. Width 900 px, 360 px a panel.
std::string RenderSvgPlot(const std::string& title, const std::vector<PlotPanel>& panels);

// Tick values covering [lo, hi] at a step of 1, 2 or 5 times a power of ten, about
// `target` of them (exposed for tests).
std::vector<double> NiceTicks(double lo, double hi, int target = 6);

}  // namespace gpupool::sim
