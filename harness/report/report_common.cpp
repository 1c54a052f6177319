// Pieces shared by the report renderers.
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/sha256.h"
#include "harness/io/array_io.h"
#include "harness/io/provenance.h"
#include "harness/io/run_results.h"
#include "harness/report/plot.h"
#include "harness/report/report.h"

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

std::string paper_string(const toml::table& paper, const std::string& key, const std::string& path) {
  const std::optional<std::string> v = paper[key].value<std::string>();
  if (!v) throw Error(path + ": " + key + " is missing (a string)");
  return *v;
}

std::vector<PaperClaim> paper_claims(const toml::table& paper, const std::string& path) {
  const toml::array* claims = paper["claims"].as_array();
  if (!claims || claims->empty()) throw Error(path + ": [[claims]] is missing (each: text, pairs = [[\"row\", \"row\"], ...])");
  std::vector<PaperClaim> out;
  for (const toml::node& n : *claims) {
    const toml::table* t = n.as_table();
    const toml::array* pairs = t ? (*t)["pairs"].as_array() : nullptr;
    const std::optional<std::string> text = t ? (*t)["text"].value<std::string>() : std::nullopt;
    if (!text || !pairs || pairs->empty()) throw Error(path + ": claims: each needs text and pairs = [[\"row\", \"row\"], ...]");
    PaperClaim c{*text, {}};
    for (const toml::node& p : *pairs) {
      const toml::array* ab = p.as_array();
      if (!ab || ab->size() != 2 || !(*ab)[0].is_string() || !(*ab)[1].is_string())
        throw Error(path + ": claims \"" + *text + "\": pairs: each pair is [\"row\", \"row\"] (the first row's loss claimed lower)");
      c.pairs.emplace_back(*(*ab)[0].value<std::string>(), *(*ab)[1].value<std::string>());
    }
    out.push_back(c);
  }
  return out;
}

// Lower case, no parentheses, without the filler words "only" and "uniform".
std::string rel(const std::string& p) {
  const std::string root = repository_root() + "/";
  std::string out = p;
  for (size_t at; root.size() > 1 && (at = out.find(root)) != std::string::npos;) out.erase(at, root.size());
  return out;
}

std::string provenance_line(const std::string& path) {
  auto a = read_h5_string_attrs(path);
  return rel(path) + ": " + a["device"] + ", commit " + a["git_commit"] + ", torch " + a["torch"] + ", CUDA " + a["cuda"] + ", " +
         a["utc"];
}

namespace {

// "path ..." -> the content hash of the file the line starts with, when it is one of the repository's.
std::string input_hash(const std::string& source) {
  const std::string path = source.substr(0, source.find(' '));
  const std::string root = repository_root();
  const std::string full = !path.empty() && path[0] == '/' ? path : root + "/" + path;
  if (path.empty() || !file_exists(full) || is_dir(full) || source.find("content ") != std::string::npos) return "";
  if (ends_with(full, ".h5")) {
    const auto attrs = read_h5_string_attrs(full);
    const auto it = attrs.find("content_sha256");
    return (it != attrs.end() ? it->second : h5_content_sha256(full)).substr(0, 12);
  }
  return sha256_file(full).substr(0, 12);
}

}  // namespace

std::string footer(const std::string& command, const std::vector<std::string>& sources) {
  std::ostringstream os;
  os << "\n## Provenance\n\n- rendered by ufp4 " << version() << " from the inputs below (content SHA-256, first 12 hex digits): the same "
     << "inputs render this file byte for byte\n";
  for (const auto& s : sources) {
    const std::string h = input_hash(s);
    os << "- " << s << (h.empty() ? "" : " [" + h + "]") << "\n";
  }
  os << "- regenerate: `" << command << "`\n";
  return os.str();
}

RunSummary summarize(const std::string& path, int64_t k) {
  const RunResults res = read_run_results(path);
  RunSummary r;
  r.name = res.run_name;
  r.path = path;
  r.recipe = res.recipe;
  r.model = res.model;
  r.commit = res.attr("git_commit");
  r.device = res.attr("device");
  // The curve as FP32, as the reports have always averaged it.
  r.loss.assign(res.curves.loss.begin(), res.curves.loss.end());
  for (double& v : r.loss) v = static_cast<float>(v);
  r.steps = static_cast<int64_t>(r.loss.size());
  r.k = std::min<int64_t>(k, r.steps);
  double s = 0;
  for (int64_t i = r.steps - r.k; i < r.steps; ++i) s += static_cast<float>(r.loss[static_cast<size_t>(i)]);
  r.tail_mean = s / static_cast<double>(r.k);
  r.final_eval = res.final_eval_loss;
  r.seed = res.seed;
  if (!std::isnan(res.epochs)) r.epochs = res.epochs;  // NaN: results written before runs knew their epochs
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
