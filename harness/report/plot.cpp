#include "harness/report/plot.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/fs.h"

namespace ufp4 {

namespace {

std::string quoted(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

std::string num(double v) {
  if (!std::isfinite(v)) return "NaN";
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

}  // namespace

std::string render_svg(const Figure& f, const std::string& svg) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) return "gnuplot not installed (apt install gnuplot-nox)";
  std::ostringstream g;
  const std::string tmp = svg + ".tmp-" + std::to_string(getpid());
  g << "set terminal svg size 720," << f.height << " dynamic font 'Helvetica,12' background '#ffffff'\nset output " << quoted(tmp) << "\n";
  g << "set title " << quoted(f.title) << " noenhanced\nset xlabel " << quoted(f.xlabel) << " noenhanced\nset ylabel " << quoted(f.ylabel)
    << " noenhanced\nset grid\nset key noenhanced\n";
  if (f.logx) g << "set logscale x\n";
  if (f.logy) g << "set logscale y\n";
  g << f.extra << "\n";
  if (f.kind == Figure::Kind::kXY) {
    for (size_t i = 0; i < f.series.size(); ++i) {
      g << "$d" << i << " << EOD\n";
      const Series& s = f.series[i];
      const bool bars = !s.xlo.empty();
      for (size_t j = 0; j < s.x.size(); ++j)
        g << num(s.x[j]) << " " << num(s.y[j]) << (bars ? " " + num(s.xlo[j]) + " " + num(s.xhi[j]) : std::string()) << "\n";
      g << "EOD\n";
    }
    g << "plot ";
    for (size_t i = 0; i < f.series.size(); ++i)
      g << (i ? ", " : "") << "$d" << i << " using " << (f.series[i].xlo.empty() ? "1:2" : "1:2:3:4") << " with " << f.series[i].style << " title "
        << quoted(f.series[i].title);
    g << "\n";
  } else if (f.kind == Figure::Kind::kBars) {
    g << "$d << EOD\n";
    for (size_t c = 0; c < f.categories.size(); ++c) {
      g << quoted(f.categories[c]);
      for (const auto& s : f.series) g << " " << num(c < s.y.size() ? s.y[c] : NAN);
      g << "\n";
    }
    g << "EOD\nset style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
      << "set xtics rotate by -35 noenhanced\nplot ";
    for (size_t i = 0; i < f.series.size(); ++i)
      g << (i ? ", " : "") << "$d using " << i + 2 << (i == 0 ? ":xtic(1)" : "") << " title " << quoted(f.series[i].title);
    g << "\n";
  } else {
    g << "$d << EOD\n";
    for (size_t r = 0; r < f.matrix.size(); ++r)
      for (size_t c = 0; c < f.matrix[r].size(); ++c) g << c << " " << r << " " << num(f.matrix[r][c]) << "\n";
    g << "EOD\nset view map\nset palette defined (-1 '#b2182b', 0 '#f7f7f7', 1 '#2166ac')\nunset grid\n";
    double lim = 0;
    for (const auto& row : f.matrix)
      for (double v : row)
        if (std::isfinite(v)) lim = std::max(lim, std::fabs(v));
    g << "set cbrange [" << num(-lim) << ":" << num(lim) << "]\nset xtics (";
    for (size_t c = 0; c < f.categories.size(); ++c) g << (c ? ", " : "") << quoted(f.categories[c]) << " " << c;
    g << ") rotate by -35 noenhanced\nset ytics (";
    for (size_t r = 0; r < f.row_labels.size(); ++r) g << (r ? ", " : "") << quoted(f.row_labels[r]) << " " << r;
    g << ") noenhanced\nplot $d using 1:2:3 with image notitle\n";
  }
  g << "set output\n";
  const std::string script = svg + ".gp.tmp-" + std::to_string(getpid());
  { std::ofstream(script) << g.str(); }
  const int rc = std::system(("gnuplot " + shell_quote(script) + " 2>/dev/null").c_str());
  std::remove(script.c_str());
  if (rc != 0 || !file_exists(tmp)) {
    std::remove(tmp.c_str());
    return "gnuplot failed to draw " + svg;
  }
  if (std::rename(tmp.c_str(), svg.c_str()) != 0) {
    std::remove(tmp.c_str());
    return "cannot write " + svg;
  }
  return "";
}

}  // namespace ufp4
