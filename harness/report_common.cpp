// Pieces shared by the report renderers.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "harness/array_io.h"
#include "harness/error.h"
#include "harness/fs.h"
#include "harness/plot.h"
#include "harness/provenance.h"
#include "harness/report.h"

namespace ufp4 {

toml::table load_paper(const std::string& path) {
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw Error(path + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  } catch (const std::exception&) {
    throw Error(path + ": cannot read the paper's numbers");
  }
}

// Lower case, no parentheses, without the filler words "only" and "uniform".
std::string rel(const std::string& p) {
  const std::string root = std::string(UFP4_SOURCE_DIR) + "/";
  return p.rfind(root, 0) == 0 ? p.substr(root.size()) : p;
}

std::string footer(const std::string& command, const std::vector<std::string>& sources) {
  std::ostringstream os;
  os << "\n## Provenance\n\n- rendered by ufp4 " << version() << " (commit " << git_commit() << ") at " << utc_now() << "\n";
  for (const auto& s : sources) os << "- " << s << "\n";
  os << "- regenerate: `" << command << "`\n";
  return os.str();
}

RunSummary summarize(const std::string& path, int64_t k) {
  RunSummary r;
  auto a = read_h5_string_attrs(path);
  r.name = a["run_name"];
  r.path = path;
  r.recipe = a["recipe"];
  r.model = a["model"];
  r.commit = a["git_commit"];
  r.device = a["device"];
  ArrayF32 loss = read_h5_f32(path, "train/loss");
  r.loss.assign(loss.data.begin(), loss.data.end());
  r.steps = static_cast<int64_t>(loss.data.size());
  r.k = std::min<int64_t>(k, r.steps);
  double s = 0;
  for (int64_t i = r.steps - r.k; i < r.steps; ++i) s += loss.data[static_cast<size_t>(i)];
  r.tail_mean = s / static_cast<double>(r.k);
  r.final_eval = read_h5_double_attr(path, "final_eval_loss");
  r.seed = static_cast<int64_t>(read_h5_double_attr(path, "seed"));
  try {
    r.epochs = read_h5_double_attr(path, "epochs");
  } catch (const std::exception&) {  // results written before runs knew their epochs
  }
  return r;
}

std::string regenerate_command(const std::string& name, const std::vector<std::string>& dirs) {
  std::string cmd = "build/ufp4 report " + name;
  for (const auto& d : dirs) cmd += " --results " + rel(d);
  return cmd;
}

std::string fmt(const char* printf_format, double v) {
  char b[64];
  std::snprintf(b, sizeof b, printf_format, v);
  return b;
}

std::string figure_markdown(const std::string& figures, const std::string& name, const Figure& fig) {
  if (figures.empty()) return "";
  make_dirs(figures);
  const std::string why = render_svg(fig, figures + "/" + name + ".svg");
  return why.empty() ? "![" + fig.title + "](figures/" + name + ".svg)\n\n" : "_(figure skipped: " + why + ")_\n\n";
}

std::pair<double, double> mean_sd(const std::vector<double>& v) {
  if (v.empty()) return {NAN, NAN};
  double s = 0, ss = 0;
  for (double x : v) s += x;
  const double m = s / static_cast<double>(v.size());
  for (double x : v) ss += (x - m) * (x - m);
  return {m, v.size() > 1 ? std::sqrt(ss / static_cast<double>(v.size() - 1)) : 0.0};
}

}  // namespace ufp4
