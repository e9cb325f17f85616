#include "sim/svg_plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace gpupool::sim {
namespace {

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(NiceTicksTest, StepsOfOneTwoOrFive) {
  EXPECT_EQ(NiceTicks(0, 1), (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
  EXPECT_EQ(NiceTicks(0, 130), (std::vector<double>{0, 50, 100, 150}));
  EXPECT_EQ(NiceTicks(-3, 7, 6), (std::vector<double>{-4, -2, 0, 2, 4, 6, 8}));
  EXPECT_EQ(NiceTicks(5, 5).size(), 2u);  // degenerate: the ends
}

TEST(SvgPlotTest, LinesBandsLegendAndEscapedText) {
  PlotPanel p;
  p.title = "Unallocated <GPUs> & more";
  p.x_label = "arrived %";
  p.y_label = "unallocated %";
  PlotSeries a{"fgd", {0, 1, 2, 3}, {10, 20, 30, 40}, {9, 19, 29, 39}, {11, 21, 31, 41}};
  PlotSeries b{"best-fit", {0, 1, 2, 3}, {5, std::nan(""), 7, 8}, {}, {}};
  p.series = {a, b};
  const std::string svg = RenderSvgPlot("Saturation", {p, p});
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("Unallocated &lt;GPUs&gt; &amp; more"), std::string::npos);
  EXPECT_EQ(svg.find("<GPUs>"), std::string::npos);
  // Two panels: per panel two lines and one band (b has none).
  EXPECT_EQ(Count(svg, "class=\"line\""), 4u);
  EXPECT_EQ(Count(svg, "class=\"band\""), 2u);
  EXPECT_EQ(Count(svg, ">fgd</text>"), 2u);
  EXPECT_EQ(Count(svg, ">best-fit</text>"), 2u);
  // The NaN breaks b's line into two pieces: two "M" moves in its path.
  const size_t at = svg.find("<title>best-fit</title>");
  ASSERT_NE(at, std::string::npos);
  const size_t start = svg.rfind("<path d=\"", at);
  const std::string path = svg.substr(start, at - start);
  EXPECT_EQ(Count(path, "M"), 2u) << path;
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(SvgPlotTest, EmptyAndFlatDataStillDraw) {
  PlotPanel empty;
  empty.title = "nothing";
  const std::string svg = RenderSvgPlot("", {empty});
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  PlotPanel flat;
  flat.series = {{"flat", {1, 1}, {3, 3}, {}, {}}};
  EXPECT_EQ(RenderSvgPlot("t", {flat}).find("nan"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::sim
