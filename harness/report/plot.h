// SVG figures for reports, drawn by gnuplot (an optional tool: without it the report still renders and
// says the figure was skipped). Data go inline into the gnuplot script; the SVG is written atomically.
#pragma once
#include <string>
#include <vector>

namespace ufp4 {

struct Series {
  std::string title;
  std::vector<double> x, y;
  std::string style = "linespoints";  // gnuplot "with" clause: lines, points, linespoints, xerrorbars, ...
  std::vector<double> xlo, xhi;       // kXY with style "xerrorbars ...": each point's horizontal interval
};

struct Figure {
  enum class Kind { kXY, kBars, kHeatmap };
  Kind kind = Kind::kXY;
  std::string title, xlabel, ylabel;
  bool logx = false, logy = false;
  std::vector<Series> series;  // kXY; kBars: y per category (x unused), one series per bar colour
  std::vector<std::string> categories;      // kBars: category labels; kHeatmap: column labels
  std::vector<std::string> row_labels;      // kHeatmap
  std::vector<std::vector<double>> matrix;  // kHeatmap: [row][column]
  std::string extra;                        // further gnuplot commands (e.g. "set key left")
  int height = 440;                         // pixels (the width is 720): a tall figure for many rows
};

// Writes `svg` with gnuplot. Returns "" on success, else why it was skipped (one line).
std::string render_svg(const Figure& f, const std::string& svg);

}  // namespace ufp4
