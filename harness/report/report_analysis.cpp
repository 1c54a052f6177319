// The shrinkage-bias analysis report: paper Figures 2, 4-7, 12 from `ufp4 analyze tensors` output, and
// the attenuation chain (Eq. 5) from `ufp4 analyze chain` output. Our assumption for the figure
// numbering (the paper's captions are not all recovered): Fig. 4/5 per-tensor SQNR with and without
// RHT for E2M1/E1M2, Fig. 6/7 per-GEMM output SQNR for E2M1/E1M2, Fig. 2 bucket-ratio change vs
// Delta SQNR, Fig. 12 Delta SQNR over layers and tensor families.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "common/error.h"
#include "common/fs.h"
#include "harness/io/array_io.h"
#include "harness/io/labelled_table.h"
#include "harness/report/plot.h"
#include "harness/report/report.h"

namespace ufp4 {

namespace {

struct Row {
  std::string layer, family, what, grid, transform;  // what: fwd_x / fwd_w / bwd_dy, or fwd_y / bwd_dx / bwd_dw
  std::vector<double> v;
};

// The rows of a tensors-file table (harness/io/labelled_table.h), labelled layer, family, what, grid, transform.
std::vector<Row> read_rows(const std::string& file, const std::string& ds) {
  const LabelledTable t = read_labelled_table(file, ds);
  std::vector<Row> out;
  for (size_t i = 0; i < t.rows(); ++i) {
    const auto& l = t.labels[i];
    if (l.size() != 5) throw Error(file + ": " + ds + ": row " + std::to_string(i) + " has " + std::to_string(l.size()) + " labels (5 expected)");
    Row r{l[0], l[1], l[2], l[3], l[4], {}};
    for (int64_t c = 0; c < t.width; ++c) r.v.push_back(t.at(i, static_cast<size_t>(c)));
    out.push_back(r);
  }
  return out;
}

// value[(layer, family/what, grid, transform)] for one column.
using Key = std::tuple<std::string, std::string, std::string, std::string>;
std::map<Key, double> index(const std::vector<Row>& rows, size_t col) {
  std::map<Key, double> m;
  for (const auto& r : rows) m[{r.layer, r.family + "/" + r.what, r.grid, r.transform}] = r.v[col];
  return m;
}

// Mean +- sd over layers of one (family/what, grid, transform).
std::pair<double, double> over_layers(const std::map<Key, double>& m, const std::string& fw, const std::string& grid, const std::string& tr) {
  std::vector<double> v;
  for (const auto& [k, x] : m)
    if (std::get<1>(k) == fw && std::get<2>(k) == grid && std::get<3>(k) == tr) v.push_back(x);
  return mean_sd(v);
}

std::string pm(std::pair<double, double> v, const char* f = "%.2f") { return fmt(f, v.first) + " ± " + fmt(f, v.second); }

std::string verdict(bool paper, bool ours) {
  return std::string("paper: ") + (paper ? "yes" : "no") + ", ours: **" + (ours ? "yes" : "no") + "**" + (paper == ours ? " (agrees)" : " (disagrees)");
}

std::string figure_line(const std::string& figures, const std::string& name, const Figure& f, std::vector<std::string>& notes) {
  if (figures.empty()) return "";
  make_dirs(figures);
  const std::string svg = figures + "/" + name + ".svg";
  const std::string why = render_svg(f, svg);
  if (!why.empty()) {
    notes.push_back(name + ": " + why);
    return "_(figure skipped: " + why + ")_\n\n";
  }
  return "![" + f.title + "](figures/" + name + ".svg)\n\n";
}

// Eq. 2 for every bin ("bins" of `ufp4 analyze tensors`, when the file has it): per grid and transform,
// the mean over layers of each bin's share, mean error and part of b_G for one tensor, beside Eq. 2's
// locally uniform prediction; then, for every tensor family whose alpha exceeds 1, the endpoint bin's
// part of alpha - 1 and alpha without it (the account of alpha > 1 tested on our tensors).
std::string bins_section(const std::string& file, const std::string& fw) {
  const std::vector<std::string> names = list_h5_datasets(file);
  if (std::find(names.begin(), names.end(), "bins") == names.end()) return "";
  const std::vector<Row> rows = read_rows(file, "bins");
  if (!rows.empty() && rows.front().v.size() != 54) throw Error(file + ": bins: rows of 9 bins x 6 numbers expected");
  // The mean over the rows of (family/what, grid, transform) of column `c` of bin `b`.
  auto mean = [&](const std::string& key, const std::string& grid, const std::string& tr, size_t b, size_t c) {
    std::vector<double> x;
    for (const auto& r : rows)
      if (r.family + "/" + r.what == key && r.grid == grid && r.transform == tr && !std::isnan(r.v[b * 6 + c])) x.push_back(r.v[b * 6 + c]);
    return mean_sd(x).first;
  };
  std::ostringstream os;
  os << "## Eq. 2 for every bin (" << fw << ")\n\nPer grid level, the elements that round to it (each block's maximum apart), in grid units: "
     << "their share, their mean rounding error E[q - t | bin] beside Eq. 2's prediction under a locally uniform density ((l - r)/2; -r/2 "
        "at zero; +l/2 at the top level, the one bin that rounds up), and their part of b_G = E[q - t]; the parts sum to b_G. Means over layers.\n\n";
  for (const char* grid : {"e2m1", "e1m2"}) {
    os << "| " << grid << " level | Eq. 2 | share I | mean error I | part of b_G I | share H16 | mean error H16 | part of b_G H16 |\n|---|---|---|---|---|---|---|---|\n";
    double sum_i = 0, sum_h = 0;
    for (size_t b = 0; b < 9; ++b) {
      const double level = mean(fw, grid, "I", b, 0);
      if (std::isnan(level)) continue;
      const bool top = b == 8;
      os << "| " << (top ? std::string("block max") : fmt("%g", level)) << " | " << (top ? std::string("0 (exact)") : fmt("%+.4f", mean(fw, grid, "I", b, 3)));
      for (const char* tr : {"I", "H16"}) os << " | " << fmt("%.4f", mean(fw, grid, tr, b, 1)) << " | " << fmt("%+.4f", mean(fw, grid, tr, b, 2)) << " | " << fmt("%+.5f", mean(fw, grid, tr, b, 4));
      os << " |\n";
      sum_i += mean(fw, grid, "I", b, 4), sum_h += mean(fw, grid, "H16", b, 4);
    }
    os << "| b_G | | | | " << fmt("%+.5f", sum_i) << " | | | " << fmt("%+.5f", sum_h) << " |\n\n";
  }
  // alpha > 1: the endpoint bin's account, per family/tensor, grid and transform (means over layers).
  std::set<std::tuple<std::string, std::string, std::string>> keys;
  for (const auto& r : rows) keys.insert({r.family + "/" + r.what, r.grid, r.transform});
  std::ostringstream expand;
  for (const auto& [key, grid, tr] : keys) {
    double alpha_minus_1 = 0, top = NAN;
    for (size_t b = 0; b < 9; ++b) alpha_minus_1 += mean(key, grid, tr, b, 5);
    for (size_t b = 0; b < 8; ++b)  // the top level: the last non-NaN level before the block maxima
      if (!std::isnan(mean(key, grid, tr, b, 0))) top = mean(key, grid, tr, b, 5);
    if (alpha_minus_1 <= 0) continue;
    expand << "| " << key << " | " << grid << " | " << tr << " | " << fmt("%.4f", 1 + alpha_minus_1) << " | " << fmt("%+.4f", top) << " | "
           << fmt("%.4f", 1 + alpha_minus_1 - top) << " | " << (1 + alpha_minus_1 - top < 1 ? "**yes**" : "no") << " |\n";
  }
  os << "### alpha > 1: the endpoint bin\n\nUnder max scaling the top level's bin has only a left half, so its elements round up: the one bin "
        "that expands. Where a tensor's alpha (Eq. 3, mean over layers) exceeds 1, its endpoint bin's part of alpha - 1 and alpha without it:\n\n";
  if (expand.str().empty()) os << "No tensor family has alpha above 1 here.\n\n";
  else os << "| tensor | grid | transform | alpha | endpoint bin's part | alpha without it | the endpoint bin accounts for alpha > 1 |\n|---|---|---|---|---|---|---|\n" << expand.str() << "\n";
  return os.str();
}

// The inputs of the MLP's two linears: the tensors the paper gives numbers for.
constexpr const char* kFc2Input = "linear_fc2/fwd_x";
constexpr const char* kFc1Input = "linear_fc1/fwd_x";

// What the sections of the analysis report share: the paper's numbers, the tensor analysis indexed by
// (layer, family/what, grid, transform), and the notes and provenance sources the sections add to.
struct AnalysisContext {
  toml::table paper;
  std::string figures;
  std::map<std::string, std::string> ta;  // the tensor analysis's attributes
  std::map<Key, double> sq, beff, gsq;    // per-tensor SQNR and B_eff, per-GEMM output SQNR
  std::set<std::string> fams, gemm_keys, layers;
  std::vector<std::string> notes, sources;
};

AnalysisContext load_tensor_analysis(const std::string& root, const std::string& tensors_h5, const std::string& figures) {
  AnalysisContext ctx;
  ctx.paper = load_paper(root + "/reports/paper/analysis.toml");
  if (!file_exists(tensors_h5)) throw Error("analysis: no tensor analysis at " + tensors_h5 + " (make reproduce-figure-4 creates it)");
  verify_h5_content(tensors_h5);
  ctx.figures = figures;
  std::vector<Row> tr = read_rows(tensors_h5, "tensors"), gr = read_rows(tensors_h5, "gemms");
  ctx.ta = read_h5_string_attrs(tensors_h5);
  ctx.sq = index(tr, 1), ctx.beff = index(tr, 3), ctx.gsq = index(gr, 0);
  for (const auto& r : tr) ctx.fams.insert(r.family + "/" + r.what), ctx.layers.insert(r.layer);
  for (const auto& r : gr) ctx.gemm_keys.insert(r.family + "/" + r.what);
  auto& ta = ctx.ta;
  ctx.sources.push_back(rel(tensors_h5) + " (from " + rel(ta["capture"]) + "; capture commit " + ta["capture_git_commit"] + ", " + ta["capture_device"] +
                        "; analysis commit " + ta["git_commit"] + ", " + ta["device"] + ")");
  return ctx;
}

// The paper's number `key` for tensor `t` (reports/paper/analysis.toml); NaN where it gives none.
double paper_number(AnalysisContext& ctx, const char* t, const char* key) { return ctx.paper[t][key].value_or(NAN); }

void write_intro(std::ostream& os, AnalysisContext& ctx) {
  os << "# Shrinkage-bias analysis: Figures 2, 4-7, 12 and the attenuation chain\n\n"
     << "Operands captured from our own training run (" << rel(ctx.ta["capture"]) << "), " << ctx.layers.size()
     << " linears; each tensor quantized by " << ctx.ta["spec"] << ". SQNR = -10 log10 NMSE (Eq. 7), Delta SQNR = SQNR(H16) - SQNR(I), "
     << "B_eff = exp(H) / K over the K = 8 magnitude buckets including zero (Eq. 6). Values are means ± standard deviation over "
     << "layers. Paper: " << ctx.paper["source"].value_or<std::string>("") << ".\n\n";
}

// The paper gives one B_eff pair without naming its grid: it is set beside the grid whose measured
// linear_fc2/fwd_x pair (I, H16) lies nearest to it, and the text says which.
std::string nearest_beff_grid(AnalysisContext& ctx) {
  auto P = [&](const char* t, const char* k) { return paper_number(ctx, t, k); };
  std::string beff_grid = "e2m1";
  double nearest = INFINITY;
  for (const char* g : {"e2m1", "e1m2"}) {
    const double dist = std::hypot(over_layers(ctx.beff, kFc2Input, g, "I").first - P("fc2_fwd_x", "beff_I"),
                                   over_layers(ctx.beff, kFc2Input, g, "H16").first - P("fc2_fwd_x", "beff_H16"));
    if (dist < nearest) nearest = dist, beff_grid = g;
  }
  return beff_grid;
}

void write_paper_comparison(std::ostream& os, AnalysisContext& ctx, const std::string& beff_grid) {
  os << "## Our numbers beside the paper's\n\n| tensor | quantity | ours | paper |\n|---|---|---|---|\n";
  auto prow = [&](const std::string& fw, const std::string& q, const std::string& ours, double p) {
    os << "| " << fw << " | " << q << " | " << ours << " | " << (std::isnan(p) ? std::string("-") : fmt("%.3f", p)) << " |\n";
  };
  auto P = [&](const char* t, const char* k) { return paper_number(ctx, t, k); };
  const auto& sq = ctx.sq;
  const auto& beff = ctx.beff;
  for (const auto& [fw, t] : std::vector<std::pair<std::string, const char*>>{{kFc2Input, "fc2_fwd_x"}, {kFc1Input, "fc1_fwd_x"}}) {
    prow(fw, "SQNR E2M1, I (dB)", pm(over_layers(sq, fw, "e2m1", "I")), P(t, "e2m1_I"));
    prow(fw, "SQNR E2M1, H16 (dB)", pm(over_layers(sq, fw, "e2m1", "H16")), P(t, "e2m1_H16"));
    prow(fw, "SQNR E1M2, I (dB)", pm(over_layers(sq, fw, "e1m2", "I")), P(t, "e1m2_I"));
    prow(fw, "SQNR E1M2, H16 (dB)", pm(over_layers(sq, fw, "e1m2", "H16")), P(t, "e1m2_H16"));
    for (const char* g : {"e2m1", "e1m2"}) {
      const double d = over_layers(sq, fw, g, "H16").first - over_layers(sq, fw, g, "I").first;
      prow(fw, std::string("Delta SQNR ") + g + " (dB)", fmt("%+.3f", d), P(t, (std::string("delta_") + g).c_str()));
    }
    for (const char* g : {"e2m1", "e1m2"}) {
      prow(fw, std::string("B_eff ") + g + ", I", pm(over_layers(beff, fw, g, "I"), "%.3f"), g == beff_grid ? P(t, "beff_I") : NAN);
      prow(fw, std::string("B_eff ") + g + ", H16", pm(over_layers(beff, fw, g, "H16"), "%.3f"), g == beff_grid ? P(t, "beff_H16") : NAN);
    }
  }
  os << "\nThe paper's B_eff pair (" << fmt("%.2f", P("fc2_fwd_x", "beff_I")) << " -> " << fmt("%.2f", P("fc2_fwd_x", "beff_H16"))
     << ") is shown beside our " << (beff_grid == "e1m2" ? "E1M2" : "E2M1")
     << " buckets, the grid whose measured linear_fc2/fwd_x pair lies nearest to it; the paper does not say which grid it counts.\n\n";
}

void write_verdicts(std::ostream& os, AnalysisContext& ctx, const std::string& beff_grid) {
  const std::string fc2 = kFc2Input, fc1 = kFc1Input;
  const auto& gsq = ctx.gsq;
  auto m = [&](const std::string& fw, const char* g, const char* t) { return over_layers(ctx.sq, fw, g, t).first; };
  os << "## Do the paper's directions hold on our tensors?\n\n";
  os << "- linear_fc2/fwd_x, E2M1 loses SQNR under RHT: " << verdict(true, m(fc2, "e2m1", "H16") < m(fc2, "e2m1", "I")) << "\n";
  os << "- linear_fc2/fwd_x, E1M2 gains SQNR under RHT: " << verdict(true, m(fc2, "e1m2", "H16") > m(fc2, "e1m2", "I")) << "\n";
  os << "- linear_fc2/fwd_x, E2M1 above E1M2 without RHT and below it with RHT: "
     << verdict(true, m(fc2, "e2m1", "I") > m(fc2, "e1m2", "I") && m(fc2, "e2m1", "H16") < m(fc2, "e1m2", "H16")) << "\n";
  os << "- linear_fc2/fwd_x, RHT raises the bucket ratio (" << beff_grid << ", the grid paired with the paper's): "
     << verdict(true, over_layers(ctx.beff, fc2, beff_grid, "H16").first > over_layers(ctx.beff, fc2, beff_grid, "I").first) << "\n";
  const double d1e = m(fc1, "e2m1", "H16") - m(fc1, "e2m1", "I"), d1u = m(fc1, "e1m2", "H16") - m(fc1, "e1m2", "I");
  const double calm = ctx.paper["fc1_fwd_x"]["well_behaved_db"].value_or(NAN);
  if (std::isnan(calm)) throw Error("reports/paper/analysis.toml: fc1_fwd_x.well_behaved_db is missing (a number, dB)");
  os << "- linear_fc1/fwd_x is well behaved (|Delta SQNR| < " << fmt("%g", calm) << " dB for both grids): "
     << verdict(true, std::fabs(d1e) < calm && std::fabs(d1u) < calm)
     << " (ours " << fmt("%+.3f", d1e) << " / " << fmt("%+.3f", d1u) << " dB)\n";
  {
    const double de = over_layers(gsq, "linear_fc2/fwd_y", "e2m1", "H16").first - over_layers(gsq, "linear_fc2/fwd_y", "e2m1", "I").first;
    os << "- E2M1 loses output SQNR on linear_fc2 FPROP under RHT: " << verdict(true, de < 0) << " (" << fmt("%+.3f", de) << " dB)\n";
    int better = 0, total = 0;
    for (const auto& k : ctx.gemm_keys) {
      const double du = over_layers(gsq, k, "e1m2", "H16").first - over_layers(gsq, k, "e1m2", "I").first;
      const double d2 = over_layers(gsq, k, "e2m1", "H16").first - over_layers(gsq, k, "e2m1", "I").first;
      better += du > d2;
      ++total;
    }
    os << "- E1M2 gains more from RHT than E2M1 on GEMM outputs: " << verdict(true, better * 2 > total) << " (" << better << " of " << total
       << " family/GEMM pairs)\n\n";
  }
}

// Figure 2 reads sq and beff with operator[], which adds a zero for a missing H16 entry; the sections
// after it see those entries, as they always have.
void write_figure2(std::ostream& os, AnalysisContext& ctx) {
  os << "## Figure 2: bucket-ratio change vs Delta SQNR\n\nEach point is one tensor of one layer.\n\n";
  Figure f2;
  f2.title = "Bucket ratio gain vs Delta SQNR (RHT-16)";
  f2.xlabel = "B_eff(H16) - B_eff(I)";
  f2.ylabel = "Delta SQNR (dB)";
  os << "| grid | points | mean B_eff gain | mean Delta SQNR (dB) | correlation |\n|---|---|---|---|---|\n";
  auto& sq = ctx.sq;
  auto& beff = ctx.beff;
  for (const char* g : {"e2m1", "e1m2"}) {
    Series s;
    s.title = g;
    s.style = "points";
    for (const auto& [k, v] : sq) {
      if (std::get<2>(k) != g || std::get<3>(k) != "I") continue;
      Key h = {std::get<0>(k), std::get<1>(k), g, "H16"};
      s.x.push_back(beff[h] - beff[k]);
      s.y.push_back(sq[h] - v);
    }
    double mx = mean_sd(s.x).first, my = mean_sd(s.y).first, sxy = 0, sxx = 0, syy = 0;
    for (size_t i = 0; i < s.x.size(); ++i) sxy += (s.x[i] - mx) * (s.y[i] - my), sxx += (s.x[i] - mx) * (s.x[i] - mx), syy += (s.y[i] - my) * (s.y[i] - my);
    os << "| " << g << " | " << s.x.size() << " | " << fmt("%+.3f", mx) << " | " << fmt("%+.3f", my) << " | " << fmt("%+.2f", sxy / std::sqrt(sxx * syy))
       << " |\n";
    f2.series.push_back(s);
  }
  os << "\n" << figure_line(ctx.figures, "analysis-figure2", f2, ctx.notes);
}

// Figures 4, 5 (tensors) and 6, 7 (GEMMs): SQNR per family without and with RHT-16, a table and a bar chart.
void write_sqnr_bars(std::ostream& os, AnalysisContext& ctx, const char* fig, const char* grid, const std::map<Key, double>& src,
                     const std::set<std::string>& keys, const std::string& what) {
  Figure f;
  f.kind = Figure::Kind::kBars;
  f.title = std::string("Figure ") + fig + ": " + what + " SQNR, " + grid + ", without / with RHT-16";
  f.ylabel = "SQNR (dB)";
  Series a, b;
  a.title = "I";
  b.title = "H16";
  os << "## Figure " << fig << ": " << what << " SQNR, " << grid << "\n\n| tensor | SQNR I (dB) | SQNR H16 (dB) | Delta (dB) |\n|---|---|---|---|\n";
  for (const auto& k : keys) {
    auto i = over_layers(src, k, grid, "I"), h = over_layers(src, k, grid, "H16");
    os << "| " << k << " | " << pm(i) << " | " << pm(h) << " | " << fmt("%+.3f", h.first - i.first) << " |\n";
    f.categories.push_back(k);
    a.y.push_back(i.first);
    b.y.push_back(h.first);
  }
  f.series = {a, b};
  f.extra = "set yrange [*:*]";
  os << "\n" << figure_line(ctx.figures, std::string("analysis-figure") + fig, f, ctx.notes);
}

// Rows: transformer blocks ("layers.N"), whatever sub-module holds the linear.
std::string block_of(const std::string& l) {
  size_t a = l.find('.');
  size_t b = a == std::string::npos ? a : l.find('.', a + 1);
  return b == std::string::npos ? l : l.substr(0, b);
}

// The transformer blocks of `layers`, in order of their layer number.
std::vector<std::string> blocks_in_order(const std::set<std::string>& layers) {
  std::vector<std::string> lv(layers.begin(), layers.end());
  std::sort(lv.begin(), lv.end(), [](const std::string& a, const std::string& b) {
    auto num = [](const std::string& s) { size_t p = s.find_first_of("0123456789"); return p == std::string::npos ? -1 : std::atoi(s.c_str() + p); };
    return num(a) != num(b) ? num(a) < num(b) : a < b;
  });
  std::vector<std::string> blocks;
  for (const auto& l : lv)
    if (std::find(blocks.begin(), blocks.end(), block_of(l)) == blocks.end()) blocks.push_back(block_of(l));
  return blocks;
}

void write_figure12(std::ostream& os, AnalysisContext& ctx) {
  os << "## Figure 12: Delta SQNR over layers and tensor families\n\n";
  const std::vector<std::string> blocks = blocks_in_order(ctx.layers);
  std::map<Key, double> by_block;  // (block, family/what, grid, transform)
  for (const auto& [k, v] : ctx.sq) by_block[{block_of(std::get<0>(k)), std::get<1>(k), std::get<2>(k), std::get<3>(k)}] = v;
  for (const char* g : {"e2m1", "e1m2"}) {
    Figure f;
    f.kind = Figure::Kind::kHeatmap;
    f.title = std::string("Delta SQNR (dB), ") + g + ": blue = RHT helps";
    f.categories.assign(ctx.fams.begin(), ctx.fams.end());
    os << "| " << g << " | " ;
    for (const auto& c : f.categories) os << c << " | ";
    os << "\n|---|";
    for (size_t i = 0; i < f.categories.size(); ++i) os << "---|";
    os << "\n";
    for (const auto& b : blocks) {
      f.row_labels.push_back(b);
      std::vector<double> row;
      os << "| " << b << " | ";
      for (const auto& c : f.categories) {
        Key i = {b, c, g, "I"}, h = {b, c, g, "H16"};
        double d = by_block.count(i) && by_block.count(h) ? by_block[h] - by_block[i] : NAN;
        row.push_back(d);
        os << fmt("%+.2f", d) << " | ";
      }
      f.matrix.push_back(row);
      os << "\n";
    }
    os << "\n" << figure_line(ctx.figures, std::string("analysis-figure12-") + g, f, ctx.notes);
  }
}

// One `ufp4 analyze chain` result: measured eta_K beside Eq. 5's prediction per grid and transform,
// the two verdicts, and the figure named after the file.
void write_chain_result(std::ostream& os, AnalysisContext& ctx, const std::string& c) {
  if (!file_exists(c)) throw Error("analysis: no chain results at " + c + " (ufp4 analyze chain --out FILE)");
  verify_h5_content(c);
  auto a = read_h5_string_attrs(c);
  const auto n = read_h5_numeric_attrs(c);
  if (n.count("residual_branch_gain") && n.at("residual_branch_gain") > 0)
    throw Error(c + ": a residual stream's chain (ufp4 analyze chain --residual " + fmt("%g", n.at("residual_branch_gain")) +
                "); this report sets measured eta beside the serial Eq. 5 and takes serial chains only (--residual 0)");
  ctx.sources.push_back(rel(c) + " (commit " + a["git_commit"] + ", " + a["device"] + ")");
  os << "Weights: " << a["weights"] << "; input: " << a["input"] << ". eta_K = projection of the quantized chain's output on the "
     << "exact output after K GEMMs; predicted = exp(-sum delta_k), delta_k = 1 - alpha_x alpha_w.\n\n";
  os << "| grid | A | K | eta_K (measured) | exp(-sum delta) (Eq. 5) |\n|---|---|---|---|---|\n";
  std::map<std::string, double> last;
  Figure f;
  f.title = "Attenuation: measured eta_K (points) and Eq. 5 (lines)";
  f.xlabel = "K (stacked GEMMs)";
  f.ylabel = "eta_K";
  for (const char* g : {"e2m1", "e1m2"})
    for (const char* t : {"I", "H16"}) {
      ArrayF32 d = read_h5_f32(c, std::string("chain/") + g + "/" + t);
      const size_t n = static_cast<size_t>(d.shape[0]);
      Series meas, pred;
      meas.title = std::string(g) + " " + t + " measured";
      meas.style = "points";
      pred.title = std::string(g) + " " + t + " Eq. 5";
      pred.style = "lines";
      for (size_t i = 0; i < n; ++i) {
        meas.x.push_back(d.data[i * 4]), meas.y.push_back(d.data[i * 4 + 1]);
        pred.x.push_back(d.data[i * 4]), pred.y.push_back(d.data[i * 4 + 2]);
      }
      os << "| " << g << " | " << t << " | " << n << " | " << fmt("%.4f", meas.y.back()) << " | " << fmt("%.4f", pred.y.back()) << " |\n";
      last[std::string(g) + t] = meas.y.back();
      f.series.push_back(meas);
      f.series.push_back(pred);
    }
  os << "\n- E2M1 attenuates faster than E1M2 (lower eta_K, no RHT): **" << (last["e2m1I"] < last["e1m2I"] ? "yes" : "no") << "** ("
     << fmt("%.4f", last["e2m1I"]) << " vs " << fmt("%.4f", last["e1m2I"]) << ")\n";
  os << "- RHT amplifies E2M1's attenuation: **" << (last["e2m1H16"] < last["e2m1I"] ? "yes" : "no") << "** (" << fmt("%.4f", last["e2m1H16"])
     << " vs " << fmt("%.4f", last["e2m1I"]) << ")\n\n";
  std::string stem = c.substr(c.rfind('/') + 1);
  stem = stem.substr(0, stem.rfind('.'));
  os << figure_line(ctx.figures, "analysis-" + stem, f, ctx.notes);
}

}  // namespace

std::string report_analysis(const std::string& root, const std::string& tensors_h5, const std::vector<std::string>& chain_h5,
                            const std::string& figures) {
  AnalysisContext ctx = load_tensor_analysis(root, tensors_h5, figures);
  std::ostringstream os;
  write_intro(os, ctx);
  const std::string beff_grid = nearest_beff_grid(ctx);
  write_paper_comparison(os, ctx, beff_grid);
  write_verdicts(os, ctx, beff_grid);
  os << bins_section(tensors_h5, kFc2Input);
  write_figure2(os, ctx);
  write_sqnr_bars(os, ctx, "4", "e2m1", ctx.sq, ctx.fams, "per-tensor");
  write_sqnr_bars(os, ctx, "5", "e1m2", ctx.sq, ctx.fams, "per-tensor");
  write_sqnr_bars(os, ctx, "6", "e2m1", ctx.gsq, ctx.gemm_keys, "per-GEMM output");
  write_sqnr_bars(os, ctx, "7", "e1m2", ctx.gsq, ctx.gemm_keys, "per-GEMM output");
  write_figure12(os, ctx);

  os << "## Signal attenuation through stacked quantized GEMMs (Eq. 5)\n\n";
  if (chain_h5.empty()) os << "No chain results given.\n\n";
  for (const auto& c : chain_h5) write_chain_result(os, ctx, c);
  for (const auto& n : ctx.notes) os << "- note: " << n << "\n";
  std::string cmd = "build/ufp4 report analysis --tensors " + rel(tensors_h5);
  for (const auto& c : chain_h5) cmd += " --chain " + rel(c);
  os << footer(cmd, ctx.sources);
  return os.str();
}

}  // namespace ufp4
