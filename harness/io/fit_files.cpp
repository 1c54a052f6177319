#include "harness/io/fit_files.h"

#include <algorithm>

#include "common/error.h"
#include "common/text.h"

namespace ufp4 {

namespace {

// The rows of an [n, cols] dataset as doubles.
std::vector<std::vector<double>> matrix_rows(const std::string& path, const std::string& dataset, size_t cols) {
  const ArrayF32 a = read_h5_f32(path, dataset);
  if (a.shape.size() != 2 || static_cast<size_t>(a.shape[1]) != cols)
    throw Error(path + ": " + dataset + " is not a table of " + std::to_string(cols) + " columns");
  std::vector<std::vector<double>> rows;
  for (int64_t i = 0; i < a.shape[0]; ++i) rows.emplace_back(a.data.begin() + i * cols, a.data.begin() + (i + 1) * cols);
  return rows;
}

void write_matrix(H5Writer& w, const std::string& dataset, const std::vector<std::vector<double>>& rows, size_t cols) {
  std::vector<float> v;
  for (const auto& r : rows)
    for (size_t j = 0; j < cols; ++j) v.push_back(j < r.size() ? static_cast<float>(r[j]) : NAN);
  w.write_f32(dataset, v.data(), {static_cast<int64_t>(rows.size()), static_cast<int64_t>(cols)});
}

void write_vector(H5Writer& w, const std::string& dataset, const std::vector<double>& v) {
  const std::vector<float> f(v.begin(), v.end());
  w.write_f32(dataset, f.data(), {static_cast<int64_t>(f.size())});
}

std::string lines(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += i + "\n";
  return s;
}

}  // namespace

void write_fit_runs(H5Writer& w, const std::string& recipe, const std::vector<FitRun>& runs) {
  std::vector<std::vector<double>> points, accounting;
  std::vector<std::string> sources, models;
  for (const auto& r : runs) {
    points.push_back({r.compute_flops, r.active_params, r.tokens, r.loss});
    accounting.push_back({r.seed, r.non_embedding_params, r.epochs});
    sources.push_back(r.source);
    models.push_back(r.model);
  }
  write_matrix(w, "points/" + recipe, points, 4);
  w.attr("columns", std::string("compute_flops,active_params,tokens,loss"), "points/" + recipe);
  // The same runs, row for row: what pairs them across recipes (seed) and their data accounting.
  write_matrix(w, "runs/" + recipe, accounting, 3);
  w.attr("columns", std::string("seed,non_embedding_params,epochs"), "runs/" + recipe);
  w.attr("sources", lines(sources), "points/" + recipe);
  w.attr("models", lines(models), "runs/" + recipe);
}

void write_fitted_form(H5Writer& w, const std::string& form, const std::string& recipe, const FittedForm& f) {
  const std::string g = form + "/" + recipe;
  const size_t np = f.names.size();
  write_vector(w, g + "/params", f.params);
  write_vector(w, g + "/lo", f.lo);
  write_vector(w, g + "/hi", f.hi);
  if (!f.samples.empty()) write_matrix(w, g + "/samples", f.samples, np);
  w.attr("names", join(f.names, ","), g + "/params");
  w.attr("c0", f.c0, g + "/params");
  w.attr("n0", f.n0, g + "/params");
  w.attr("d0", f.d0, g + "/params");
  w.attr("rmse", f.rmse, g + "/params");
  w.attr("bootstrap_used", f.bootstrap_used, g + "/params");
  w.attr("bootstrap_skipped", f.bootstrap_skipped, g + "/params");
}

std::vector<FitRun> read_fit_runs(const std::string& path, const std::string& recipe) {
  std::vector<FitRun> runs;
  const auto sources = split(read_h5_string_attrs(path, "points/" + recipe)["sources"], '\n', /*skip_empty=*/true);
  for (const auto& p : matrix_rows(path, "points/" + recipe, 4)) {
    FitRun r;
    r.compute_flops = p[0], r.active_params = p[1], r.tokens = p[2], r.loss = p[3];
    if (runs.size() < sources.size()) r.source = sources[runs.size()];
    runs.push_back(r);
  }
  const auto datasets = list_h5_datasets(path);
  if (std::find(datasets.begin(), datasets.end(), "runs/" + recipe) == datasets.end()) return runs;  // before the runs/ rows
  const auto accounting = matrix_rows(path, "runs/" + recipe, 3);
  const auto models = split(read_h5_string_attrs(path, "runs/" + recipe)["models"], '\n', /*skip_empty=*/true);
  if (accounting.size() != runs.size() || models.size() != runs.size())
    throw Error(path + ": runs/" + recipe + " does not match points/" + recipe + " row for row");
  for (size_t i = 0; i < runs.size(); ++i) {
    runs[i].seed = accounting[i][0], runs[i].non_embedding_params = accounting[i][1], runs[i].epochs = accounting[i][2];
    runs[i].model = models[i];
  }
  return runs;
}

FittedForm read_fitted_form(const std::string& path, const std::string& form, const std::string& recipe) {
  const std::string g = form + "/" + recipe;
  FittedForm f;
  auto attrs = read_h5_string_attrs(path, g + "/params");
  f.names = split(attrs["names"], ',');
  const ArrayF32 p = read_h5_f32(path, g + "/params"), lo = read_h5_f32(path, g + "/lo"), hi = read_h5_f32(path, g + "/hi");
  f.params.assign(p.data.begin(), p.data.end());
  f.lo.assign(lo.data.begin(), lo.data.end());
  f.hi.assign(hi.data.begin(), hi.data.end());
  const auto num = read_h5_numeric_attrs(path, g + "/params");
  f.c0 = num.at("c0"), f.n0 = num.at("n0"), f.d0 = num.at("d0"), f.rmse = num.at("rmse");
  f.bootstrap_used = static_cast<int64_t>(num.at("bootstrap_used")), f.bootstrap_skipped = static_cast<int64_t>(num.at("bootstrap_skipped"));
  const auto datasets = list_h5_datasets(path);
  if (std::find(datasets.begin(), datasets.end(), g + "/samples") != datasets.end())
    for (auto& s : matrix_rows(path, g + "/samples", f.names.size())) f.samples.push_back(std::isnan(s[0]) ? std::vector<double>{} : s);
  return f;
}

}  // namespace ufp4
