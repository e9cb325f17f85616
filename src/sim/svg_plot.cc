#include "sim/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpupool::sim {
namespace {

constexpr double kWidth = 900;
constexpr double kPanelHeight = 360;
constexpr double kTitleHeight = 40;
constexpr double kLeft = 70;    // room for the y ticks and label
constexpr double kRight = 190;  // room for the legend
constexpr double kTop = 34;     // the panel's title
constexpr double kBottom = 50;  // the x ticks and label

// Colour-blind-safe (Okabe-Ito), cycled.
constexpr const char* kColours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                    "#E69F00", "#56B4E9", "#000000", "#F0E442"};

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        // Control characters have no place in XML 1.0 text.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t') out += c;
    }
  }
  return out;
}

std::string Number(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e6 || a < 1e-3) return fmt::format("{:.3g}", v);
  std::string s = fmt::format("{:.6f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void Add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  void Fix() {
    if (!(lo <= hi)) {
      lo = 0;
      hi = 1;
    } else if (lo == hi) {
      lo -= 1;
      hi += 1;
    }
  }
};

class Panel {
 public:
  Panel(const PlotPanel& p, double top) : p_(p), top_(top) {
    for (const PlotSeries& s : p.series) {
      for (double v : s.x) x_.Add(v);
      for (double v : s.y) y_.Add(v);
      for (double v : s.low) y_.Add(v);
      for (double v : s.high) y_.Add(v);
    }
    if (p.y_min) y_.lo = *p.y_min;
    if (p.y_max) y_.hi = *p.y_max;
    x_.Fix();
    y_.Fix();
    // Round the y range out to its ticks, so the top line is a labelled one.
    const std::vector<double> ticks = NiceTicks(y_.lo, y_.hi);
    if (!p.y_min) y_.lo = std::min(y_.lo, ticks.front());
    if (!p.y_max) y_.hi = std::max(y_.hi, ticks.back());
  }

  std::string Render() const {
    std::string out;
    const double x0 = kLeft;
    const double x1 = kWidth - kRight;
    const double y0 = top_ + kTop;
    const double y1 = top_ + kPanelHeight - kBottom;
    out += fmt::format(R"svg(<text x="{}" y="{}" class="title">{}</text>)svg", Number(x0),
                       Number(top_ + 22), Escape(p_.title));
    out += "\n";
    out += fmt::format(R"svg(<rect x="{}" y="{}" width="{}" height="{}" class="frame"/>)svg",
                       Number(x0), Number(y0), Number(x1 - x0), Number(y1 - y0));
    out += "\n";
    for (double t : NiceTicks(x_.lo, x_.hi, 8)) {
      if (t < x_.lo - 1e-9 || t > x_.hi + 1e-9) continue;
      const double x = X(t);
      out += fmt::format(
          R"svg(<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" class="grid"/><text x="{0}" y="{3}" class="xtick">{4}</text>)svg",
          Number(x), Number(y0), Number(y1), Number(y1 + 16), Number(t));
      out += "\n";
    }
    for (double t : NiceTicks(y_.lo, y_.hi)) {
      if (t < y_.lo - 1e-9 || t > y_.hi + 1e-9) continue;
      const double y = Y(t);
      out += fmt::format(
          R"svg(<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" class="grid"/><text x="{3}" y="{4}" class="ytick">{5}</text>)svg",
          Number(x0), Number(y), Number(x1), Number(x0 - 6), Number(y + 4), Number(t));
      out += "\n";
    }
    out += fmt::format(R"svg(<text x="{}" y="{}" class="xlabel">{}</text>)svg",
                       Number((x0 + x1) / 2), Number(y1 + 38), Escape(p_.x_label));
    out += "\n";
    out += fmt::format(
        R"svg(<text x="{0}" y="{1}" class="ylabel" transform="rotate(-90 {0} {1})">{2}</text>)svg",
        Number(18), Number((y0 + y1) / 2), Escape(p_.y_label));
    out += "\n";
    for (size_t i = 0; i < p_.series.size(); ++i) {
      const PlotSeries& s = p_.series[i];
      const char* colour = kColours[i % std::size(kColours)];
      out += Band(s, colour);
      out += fmt::format(R"svg(<path d="{}" class="line" stroke="{}"><title>{}</title></path>)svg",
                         Path(s.x, s.y), colour, Escape(s.name));
      out += "\n";
      const double ly = y0 + 8 + static_cast<double>(i) * 20;
      out += fmt::format(
          R"svg(<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="{3}" class="key"/><text x="{4}" y="{5}" class="legend">{6}</text>)svg",
          Number(x1 + 14), Number(ly), Number(x1 + 38), colour, Number(x1 + 44), Number(ly + 4),
          Escape(s.name));
      out += "\n";
    }
    return out;
  }

 private:
  double X(double v) const {
    return kLeft + (v - x_.lo) / (x_.hi - x_.lo) * (kWidth - kRight - kLeft);
  }
  double Y(double v) const {
    const double y0 = top_ + kTop;
    const double y1 = top_ + kPanelHeight - kBottom;
    return y1 - (std::clamp(v, y_.lo, y_.hi) - y_.lo) / (y_.hi - y_.lo) * (y1 - y0);
  }

  // "M x y L x y ...", a new M after every NaN.
  std::string Path(const std::vector<double>& xs, const std::vector<double>& ys) const {
    std::string d;
    bool pen = false;
    for (size_t i = 0; i < xs.size() && i < ys.size(); ++i) {
      if (!std::isfinite(xs[i]) || !std::isfinite(ys[i])) {
        pen = false;
        continue;
      }
      d += fmt::format("{}{},{} ", pen ? "L" : "M", Number(X(xs[i])), Number(Y(ys[i])));
      pen = true;
    }
    if (!d.empty()) d.pop_back();
    return d;
  }

  // The band as closed polygons, one per run of finite points.
  std::string Band(const PlotSeries& s, const char* colour) const {
    if (s.low.size() != s.x.size() || s.high.size() != s.x.size()) return "";
    std::string out;
    size_t i = 0;
    while (i < s.x.size()) {
      size_t j = i;
      while (j < s.x.size() && std::isfinite(s.x[j]) && std::isfinite(s.low[j]) &&
             std::isfinite(s.high[j])) {
        ++j;
      }
      if (j - i >= 2) {
        std::string d;
        for (size_t k = i; k < j; ++k) {
          d += fmt::format("{}{},{} ", k == i ? "M" : "L", Number(X(s.x[k])), Number(Y(s.high[k])));
        }
        for (size_t k = j; k-- > i;) {
          d += fmt::format("L{},{} ", Number(X(s.x[k])), Number(Y(s.low[k])));
        }
        d += "Z";
        out += fmt::format(R"svg(<path d="{}" class="band" fill="{}"/>)svg", d, colour);
        out += "\n";
      }
      i = j + 1;
    }
    return out;
  }

  const PlotPanel& p_;
  double top_;
  Range x_;
  Range y_;
};

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || hi <= lo || target < 2) return {lo, hi};
  const double raw = (hi - lo) / (target - 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> out;
  const double first = std::floor(lo / step) * step;
  for (double t = first; t <= hi + step * 0.5 && out.size() < 100; t += step) {
    out.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  }
  return out;
}

std::string RenderSvgPlot(const std::string& title, const std::vector<PlotPanel>& panels) {
  const double height = kTitleHeight + kPanelHeight * static_cast<double>(panels.size());
  std::string out = fmt::format(
      R"svg(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" viewBox="0 0 {0} {1}" font-family="sans-serif">)svg",
      Number(kWidth), Number(height));
  out += "\n";
  out +=
      "<style>.title{font-size:15px;font-weight:bold}.frame{fill:none;stroke:#444}"
      ".grid{stroke:#ddd}.xtick{font-size:11px;text-anchor:middle}"
      ".ytick{font-size:11px;text-anchor:end}.xlabel,.ylabel{font-size:12px;text-anchor:middle}"
      ".line{fill:none;stroke-width:1.8}.band{opacity:0.18;stroke:none}"
      ".key{stroke-width:3}.legend{font-size:12px}</style>\n";
  out += fmt::format(R"svg(<rect width="{}" height="{}" fill="white"/>)svg", Number(kWidth),
                     Number(height));
  out += "\n";
  out += fmt::format(R"svg(<text x="{}" y="26" class="title" font-size="17">{}</text>)svg",
                     Number(kLeft), Escape(title));
  out += "\n";
  for (size_t i = 0; i < panels.size(); ++i) {
    out += Panel(panels[i], kTitleHeight + kPanelHeight * static_cast<double>(i)).Render();
  }
  out += "</svg>\n";
  return out;
}

}  // namespace gpupool::sim
