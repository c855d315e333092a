#include "braid/report/svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace braid::report {
namespace {

// Round tick steps (1, 2, 5 x 10^k) so axes read naturally.
double nice_step(double span, int target_ticks) {
  if (span <= 0 || !std::isfinite(span)) return 1.0;
  double raw = span / std::max(1, target_ticks);
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double f = raw / mag;
  double nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  return nice * mag;
}

std::string fmt_num(double v) {
  if (v == 0) return "0";
  double a = std::fabs(v);
  if (a >= 1e5 || a < 1e-3) return fmt::format("{:.2e}", v);
  if (a >= 100) return fmt::format("{:.0f}", v);
  if (a >= 10) return fmt::format("{:.1f}", v);
  return fmt::format("{:.3g}", v);
}

std::string svg_open(int w, int h, std::string_view label) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" "
      "role=\"img\" aria-label=\"{2}\" font-family=\"sans-serif\" font-size=\"11\">"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"#ffffff\"/>",
      w, h, escape_html(label));
}

}  // namespace

std::string escape_html(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string series_colour(std::size_t i) {
  // Okabe-Ito palette: distinguishable for colour-blind readers.
  static const char* palette[] = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442",
                                  "#0072B2", "#D55E00", "#CC79A7", "#999999"};
  return palette[i % (sizeof(palette) / sizeof(palette[0]))];
}

std::string score_colour(double score, double lo, double hi) {
  // Blue (low) -> yellow (high), roughly viridis endpoints through green.
  double t = hi > lo ? std::clamp((score - lo) / (hi - lo), 0.0, 1.0) : 1.0;
  struct Rgb { double r, g, b; };
  const Rgb stops[] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  double pos = t * 4;
  int k = std::min(3, static_cast<int>(pos));
  double f = pos - k;
  auto mix = [&](double a, double b) { return static_cast<int>(std::lround(a + (b - a) * f)); };
  return fmt::format("#{:02x}{:02x}{:02x}", mix(stops[k].r, stops[k + 1].r), mix(stops[k].g, stops[k + 1].g),
                     mix(stops[k].b, stops[k + 1].b));
}

std::string step_chart_svg(const std::vector<Curve>& curves, const ChartOptions& o) {
  const int W = o.width, H = o.height;
  const double left = 64, right = 150, top = 28, bottom = 42;
  std::string s = svg_open(W, H, o.title);
  s += fmt::format("<text x=\"{}\" y=\"18\" font-size=\"13\" font-weight=\"bold\">{}</text>", left, escape_html(o.title));
  double x_min = 0, x_max = 0, y_min = std::numeric_limits<double>::infinity(), y_max = -y_min;
  bool any = false;
  for (const auto& c : curves) {
    x_max = std::max(x_max, c.x_end);
    for (const auto& p : c.points) {
      any = true;
      x_max = std::max(x_max, p.x);
      y_min = std::min(y_min, p.y);
      y_max = std::max(y_max, p.y);
    }
  }
  if (!any) {
    s += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#666\">no correct candidate yet</text></svg>", left, H / 2);
    return s;
  }
  if (y_max - y_min < 1e-12) {
    double pad = std::max(std::fabs(y_max) * 0.05, 1e-3);
    y_min -= pad;
    y_max += pad;
  } else {
    double pad = (y_max - y_min) * 0.05;
    y_min -= pad;
    y_max += pad;
  }
  if (x_max <= x_min) x_max = x_min + 1;
  const double pw = W - left - right, ph = H - top - bottom;
  auto X = [&](double x) { return left + (x - x_min) / (x_max - x_min) * pw; };
  auto Y = [&](double y) { return top + (1 - (y - y_min) / (y_max - y_min)) * ph; };

  // Grid and ticks.
  double ys = nice_step(y_max - y_min, 5);
  for (double y = std::ceil(y_min / ys) * ys; y <= y_max + 1e-12; y += ys) {
    s += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e5e5e5\"/>", left, left + pw, Y(y), Y(y));
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" fill=\"#444\">{}</text>", left - 6, Y(y) + 4, fmt_num(y));
  }
  double xs = nice_step(x_max - x_min, 6);
  for (double x = std::ceil(x_min / xs) * xs; x <= x_max + 1e-12; x += xs) {
    s += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#f0f0f0\"/>", X(x), X(x), top, top + ph);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#444\">{}</text>", X(x), top + ph + 14, fmt_num(x));
  }
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>", left, top, pw, ph);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" fill=\"#222\">{}</text>", left + pw / 2, H - 8, escape_html(o.x_label));
  s += fmt::format("<text transform=\"translate(14 {:.1f}) rotate(-90)\" text-anchor=\"middle\" fill=\"#222\">{}</text>", top + ph / 2,
                   escape_html(o.y_label));

  // The first curve (overall, or the first run) is drawn last, on top of the others.
  for (std::size_t k = 0; k < curves.size(); ++k) {
    std::size_t i = (k + 1) % curves.size();
    const auto& c = curves[i];
    if (c.points.empty()) continue;
    std::string colour = series_colour(i);
    std::string d = fmt::format("M{:.1f},{:.1f}", X(c.points[0].x), Y(c.points[0].y));
    for (std::size_t k = 1; k < c.points.size(); ++k)
      d += fmt::format(" H{:.1f} V{:.1f}", X(c.points[k].x), Y(c.points[k].y));
    d += fmt::format(" H{:.1f}", X(std::max(c.x_end, c.points.back().x)));
    double width = i == 0 ? 2.5 : 1.5;
    s += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" data-series=\"{}\"/>", d, colour, width,
                     escape_html(c.label));
    for (const auto& p : c.points)
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"><title>{} {}: {} (x {})</title></circle>", X(p.x),
                       Y(p.y), colour, escape_html(c.label), escape_html(p.id), fmt_num(p.y), fmt_num(p.x));
    double ly = top + 6 + 16 * static_cast<double>(i);
    s += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"3\"/>", left + pw + 12,
                     left + pw + 30, ly, ly, colour);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#222\">{} ({})</text>", left + pw + 36, ly + 4,
                     escape_html(c.label), fmt_num(c.points.back().y));
  }
  s += "</svg>";
  return s;
}

std::string bar_chart_svg(const std::vector<std::pair<std::string, double>>& bars, const ChartOptions& o) {
  const int W = o.width;
  const double left = 130, right = 60, top = 28, row = 22;
  const int H = static_cast<int>(top + row * static_cast<double>(std::max<std::size_t>(bars.size(), 1)) + 12);
  std::string s = svg_open(W, H, o.title);
  s += fmt::format("<text x=\"8\" y=\"18\" font-size=\"13\" font-weight=\"bold\">{}</text>", escape_html(o.title));
  double max_v = 0;
  for (const auto& b : bars) max_v = std::max(max_v, b.second);
  if (bars.empty()) s += fmt::format("<text x=\"8\" y=\"{}\" fill=\"#666\">nothing recorded yet</text>", top + 14);
  const double pw = W - left - right;
  for (std::size_t i = 0; i < bars.size(); ++i) {
    double y = top + row * static_cast<double>(i);
    double w = max_v > 0 ? bars[i].second / max_v * pw : 0;
    bool ok = bars[i].first == "ok";
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\" fill=\"#222\">{}</text>", left - 6, y + 14,
                     escape_html(bars[i].first));
    s += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"16\" fill=\"{}\"/>", left, y + 2, std::max(w, 1.0),
                     ok ? "#009E73" : "#D55E00");
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#222\">{}</text>", left + std::max(w, 1.0) + 6, y + 14, fmt_num(bars[i].second));
  }
  s += "</svg>";
  return s;
}

std::string tree_svg(const json& tree, int width) {
  const auto& nodes = tree.at("nodes");
  if (nodes.empty()) return svg_open(width, 40, "lineage") + "<text x=\"8\" y=\"24\" fill=\"#666\">no candidates</text></svg>";
  double max_x = 0, max_y = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& n : nodes) {
    max_x = std::max(max_x, n.at("x").get<double>());
    max_y = std::max(max_y, n.at("y").get<double>());
    if (n.at("correct").get<bool>()) {
      lo = std::min(lo, n.at("score").get<double>());
      hi = std::max(hi, n.at("score").get<double>());
    }
  }
  const double col = max_x > 0 ? std::min(160.0, (width - 140.0) / max_x) : 0, row = 22, pad = 30;
  int height = static_cast<int>(max_y * row + 2 * pad);
  std::string s = svg_open(width, height, "lineage tree");
  auto X = [&](double x) { return pad + x * col; };
  auto Y = [&](double y) { return pad + y * row; };
  std::map<std::string, std::pair<double, double>> at;
  for (const auto& n : nodes) at[n.at("id").get<std::string>()] = {X(n.at("x").get<double>()), Y(n.at("y").get<double>())};
  for (const auto& e : tree.at("edges")) {
    auto a = at[e.at("from").get<std::string>()], b = at[e.at("to").get<std::string>()];
    double mid = (a.first + b.first) / 2;
    s += fmt::format("<path d=\"M{:.1f},{:.1f} C{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}\" fill=\"none\" stroke=\"#bbb\"/>", a.first,
                     a.second, mid, a.second, mid, b.second, b.first, b.second);
  }
  for (const auto& n : nodes) {
    auto [x, y] = at[n.at("id").get<std::string>()];
    bool correct = n.at("correct").get<bool>();
    std::string fill = correct ? score_colour(n.at("score").get<double>(), lo, hi) : "#cccccc";
    bool focus = n.value("focus", false);
    std::string id = n.at("id").get<std::string>();
    s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" fill=\"{}\" stroke=\"{}\" stroke-width=\"{}\"><title>{} gen {} island {} "
                     "score {} {}</title></circle>",
                     x, y, focus ? 7 : 5, fill, focus ? "#d00" : "#333", focus ? 2.5 : 0.8, escape_html(id),
                     n.at("generation").get<std::int64_t>(), n.at("island").get<int>(), fmt_num(n.at("score").get<double>()),
                     escape_html(n.at("failure").get<std::string>()));
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#333\" font-size=\"9\">{}{}</text>", x + 8, y + 3, escape_html(id.substr(0, 8)),
                     n.value("hidden", 0) > 0 ? fmt::format(" +{}", n.value("hidden", 0)) : "");
  }
  s += "</svg>";
  return s;
}

// The report's (static) form of the UI's every-candidate plot (web/ui/charts.js scoreScatter):
// hollow points for single measurements; re-measured candidates filled, with their re-run range
// and median; rebench medians as diamonds; the seed's score dashed; the reported best ringed.
std::string points_svg(const json& p, const ChartOptions& o) {
  const int W = o.width, H = o.height;
  const double left = 64, right = 20, top = 28, bottom = 42;
  std::string s = svg_open(W, H, o.title);
  s += fmt::format("<text x=\"{}\" y=\"18\" font-size=\"13\" font-weight=\"bold\">{}</text>", left, escape_html(o.title));
  const json& items = p.at("items");
  std::vector<double> ys;
  for (const auto& c : items) {
    ys.push_back(c.at("score").get<double>());
    for (const auto& r : c.at("reruns")) ys.push_back(r.get<double>());
    if (c.at("rebench_median").is_number()) ys.push_back(c.at("rebench_median").get<double>());
  }
  if (p.at("seed").is_object()) ys.push_back(p["seed"].at("score").get<double>());
  if (ys.empty()) return s + fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#666\">no correct candidate yet</text></svg>", left, H / 2);
  auto [lo_it, hi_it] = std::minmax_element(ys.begin(), ys.end());
  double y_min = *lo_it, y_max = *hi_it;
  const double pad = y_max > y_min ? (y_max - y_min) * 0.05 : std::max(std::fabs(y_max) * 0.05, 1e-3);
  y_min -= pad;
  y_max += pad;
  const double x_max = std::max(2.0, p.at("evaluations").get<double>());
  const double pw = W - left - right, ph = H - top - bottom;
  auto X = [&](double x) { return left + (x - 1) / (x_max - 1) * pw; };
  auto Y = [&](double y) { return top + (1 - (y - y_min) / (y_max - y_min)) * ph; };
  const double ys_step = nice_step(y_max - y_min, 5);
  for (double y = std::ceil(y_min / ys_step) * ys_step; y <= y_max + 1e-12; y += ys_step)
    s += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e5e5e5\"/><text x=\"{:.1f}\" y=\"{:.1f}\" "
                     "text-anchor=\"end\" fill=\"#444\">{}</text>",
                     left, left + pw, Y(y), Y(y), left - 6, Y(y) + 4, fmt_num(y));
  const double xs_step = std::max(1.0, nice_step(x_max - 1, 6));
  for (double x = xs_step; x <= x_max + 1e-12; x += xs_step)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#444\">{}</text>", X(x), top + ph + 16, fmt_num(x));
  s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" fill=\"#333\">{}</text>", left + pw / 2, H - 6, escape_html(o.x_label));
  if (p.at("seed").is_object()) {
    const double sy = Y(p["seed"].at("score").get<double>());
    s += fmt::format("<line class=\"seed-line\" x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#CC79A7\" stroke-dasharray=\"6 4\"/>"
                     "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" fill=\"#CC79A7\">seed {}</text>",
                     left, left + pw, sy, sy, left + pw - 2, sy - 4, fmt_num(p["seed"].at("score").get<double>()));
  }
  for (const auto& c : items) {
    const double cx = X(c.at("x").get<double>()), cy = Y(c.at("score").get<double>());
    const std::string id = escape_html(c.at("id").get<std::string>());
    const json& reruns = c.at("reruns");
    if (reruns.empty()) {
      s += fmt::format("<circle class=\"pt single\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"none\" stroke=\"#888\"><title>{} (single measurement)</title></circle>", cx, cy, id);
      continue;
    }
    const bool refuted = c.at("refuted").get<bool>();
    const char* colour = refuted ? "#D55E00" : "#0072B2";
    double lo = reruns[0].get<double>(), hi = lo;
    for (const auto& r : reruns) lo = std::min(lo, r.get<double>()), hi = std::max(hi, r.get<double>());
    const double my = Y(c.at("median").get<double>());
    s += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" stroke-width=\"2\"/>"
                     "<line x1=\"{4:.1f}\" x2=\"{5:.1f}\" y1=\"{6:.1f}\" y2=\"{6:.1f}\" stroke=\"{3}\" stroke-width=\"2\"/>"
                     "<circle class=\"pt {7}\" cx=\"{0:.1f}\" cy=\"{8:.1f}\" r=\"4.5\" fill=\"{3}\" stroke=\"#fff\"><title>{9}: {10} re-runs, median {11}</title></circle>",
                     cx, Y(lo), Y(hi), colour, cx - 5, cx + 5, my, refuted ? "refuted" : "confirmed", cy, id, reruns.size(),
                     fmt_num(c.at("median").get<double>()));
  }
  for (const auto& c : items)
    if (c.at("rebench_median").is_number()) {
      const double cx = X(c.at("x").get<double>()), cy = Y(c.at("rebench_median").get<double>());
      s += fmt::format("<path class=\"rebench\" d=\"M{0:.1f},{1:.1f}L{2:.1f},{3:.1f}L{0:.1f},{4:.1f}L{5:.1f},{3:.1f}Z\" fill=\"#009E73\"/>", cx, cy - 6,
                       cx + 6, cy, cy + 6, cx - 6);
    }
  if (const json& best = p.at("best"); best.is_object())
    for (const auto& c : items)
      if (c.at("id") == best.at("id"))
        s += fmt::format("<circle class=\"best-mark\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"9\" fill=\"none\" stroke=\"#000\" stroke-width=\"2.5\"{}/>",
                         X(c.at("x").get<double>()), Y(best.at("score").get<double>()),
                         best.value("confirmed", false) ? "" : " stroke-dasharray=\"3 2\"");
  return s + "</svg>";
}

}  // namespace braid::report
