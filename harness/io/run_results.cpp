#include "harness/io/run_results.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <variant>
#include <vector>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/text.h"
#include "common/sha256.h"
#include "harness/io/array_io.h"
#include "harness/io/provenance.h"

namespace ufp4 {

namespace {

// 3: the file carries content_sha256 (harness/io/array_io.h), checked by every read.
constexpr int64_t kSchemaVersion = 3;

// A RunResults member stored as the root attribute of the same name, with the value a file that lacks
// it (an older schema) reads as; a text attribute that is empty reads as its absent value too. The
// writer and the reader take these lists, in the order the writer writes them.
struct MemberAttr {
  const char* name;
  std::variant<std::string RunResults::*, int64_t RunResults::*, bool RunResults::*, double RunResults::*> member;
  double absent_number = 0;
  const char* absent_text = "";
};

// What was run and how, written before the curves.
const std::vector<MemberAttr>& run_attrs() {
  static const std::vector<MemberAttr> a = {
      {"run_name", &RunResults::run_name},
      {"run_id", &RunResults::run_id},
      {"run_identity", &RunResults::run_identity},
      {"manifest", &RunResults::manifest},
      {"manifest_sha256", &RunResults::manifest_sha256},
      {"manifest_path", &RunResults::manifest_path},
      {"model", &RunResults::model},
      {"model_sha256", &RunResults::model_sha256},
      {"recipe", &RunResults::recipe},
      {"recipe_resolved", &RunResults::recipe_resolved},
      {"recipe_sha256", &RunResults::recipe_sha256},
      {"data_path", &RunResults::data_path},
      {"data_manifest_sha256", &RunResults::data_manifest_sha256},
      {"data_train_tokens", &RunResults::data_train_tokens, 0},
      {"seed", &RunResults::seed, 1},
      {"deterministic", &RunResults::deterministic, 0},
      {"world_size", &RunResults::world_size, 1},
      {"expert_parallel", &RunResults::expert_parallel, 1},
      {"backend", &RunResults::backend, 0, "none"},
      {"optimizer_sharding", &RunResults::optimizer_sharding, 0, "none"},
      {"cuda_graph", &RunResults::cuda_graph, 0, "off"},
      {"utc_start", &RunResults::utc_start},
      {"utc_end", &RunResults::utc_end},  // written as now when the run sets none
      {"device_name", &RunResults::device_name},
      {"weights_sha256", &RunResults::weights_sha256},
  };
  return a;
}

// How it went, written after the summary of the curves.
const std::vector<MemberAttr>& outcome_attrs() {
  static const std::vector<MemberAttr> a = {
      {"diverged", &RunResults::diverged, 0},
      {"diverged_step", &RunResults::diverged_step, -1},
      {"tokens_per_s", &RunResults::tokens_per_s, NAN},
      {"mfu", &RunResults::mfu, NAN},
      {"flops_per_token", &RunResults::flops_per_token, NAN},
      {"peak_memory_gb", &RunResults::peak_memory_gb, NAN},
  };
  return a;
}

void write_member_attrs(H5Writer& w, const RunResults& r, const std::vector<MemberAttr>& attrs) {
  for (const auto& a : attrs) {
    if (auto text = std::get_if<std::string RunResults::*>(&a.member)) {
      const std::string& v = r.**text;
      w.attr(a.name, v.empty() && std::string(a.name) == "utc_end" ? utc_now() : v);
    } else if (auto whole = std::get_if<int64_t RunResults::*>(&a.member)) {
      w.attr(a.name, r.**whole);
    } else if (auto flag = std::get_if<bool RunResults::*>(&a.member)) {
      w.attr(a.name, static_cast<int64_t>(r.**flag));
    } else {
      w.attr(a.name, r.*std::get<double RunResults::*>(a.member));
    }
  }
}

void read_member_attrs(RunResults& r, const std::map<std::string, double>& numbers, const std::vector<MemberAttr>& attrs) {
  for (const auto& a : attrs) {
    const auto it = numbers.find(a.name);
    const double number = it == numbers.end() ? a.absent_number : it->second;
    if (auto text = std::get_if<std::string RunResults::*>(&a.member)) {
      const std::string& v = r.attr(a.name);
      r.**text = v.empty() ? a.absent_text : v;
    } else if (auto whole = std::get_if<int64_t RunResults::*>(&a.member)) {
      r.**whole = static_cast<int64_t>(number);
    } else if (auto flag = std::get_if<bool RunResults::*>(&a.member)) {
      r.**flag = static_cast<int64_t>(number) != 0;
    } else {
      r.*std::get<double RunResults::*>(a.member) = number;
    }
  }
}

double mean_of_last(const std::vector<double>& l, int64_t k) {
  const size_t n = l.size(), m = std::min(n, static_cast<size_t>(std::max<int64_t>(k, 1)));
  if (m == 0) return NAN;
  double s = 0;
  for (size_t i = n - m; i < n; ++i) s += l[i];
  return s / static_cast<double>(m);
}

// The summaries a results file stores beside its curves, each a function of them: written from them, and checked
// against them when read (check_summaries). `steps`: the steps recorded (train/step's length when written).
struct Summaries {
  int64_t steps_done, last_k;
  double final_loss, mean_loss_last_k, final_eval_loss, epochs;
};
Summaries summaries_of(int64_t steps, const std::vector<double>& loss, const std::vector<double>& eval_loss, const std::vector<double>& tokens,
                       int64_t data_train_tokens) {
  const int64_t k = std::max<int64_t>(1, std::min<int64_t>(1000, steps / 10));  // the last tenth, at most 1,000
  const double tokens_done = steps && !tokens.empty() ? tokens.back() : 0.0;
  return {steps,
          k,
          steps ? loss.back() : NAN,
          steps ? mean_of_last(loss, k) : NAN,
          eval_loss.empty() ? NAN : eval_loss.back(),
          data_train_tokens > 0 ? tokens_done / static_cast<double>(data_train_tokens) : 0.0};  // 0: the split's size not recorded
}

}  // namespace

double RunResults::tail_mean(int64_t k) const { return mean_of_last(curves.loss, k); }

const std::string& RunResults::attr(const std::string& key) const {
  static const std::string none;
  auto it = attrs.find(key);
  return it == attrs.end() ? none : it->second;
}

void write_run_results(const std::string& path, const RunResults& r) {
  const RunCurves& c = r.curves;
  H5Writer w(path);
  write_provenance(w);
  w.attr("schema_version", kSchemaVersion);
  write_member_attrs(w, r, run_attrs());
  const int64_t n = static_cast<int64_t>(c.step.size());
  auto put = [&](const std::string& name, const std::vector<double>& v, const std::string& unit) {
    w.write_f64(name, v.data(), {static_cast<int64_t>(v.size())});
    w.attr("units", unit, name);
  };
  std::vector<int64_t> steps(c.step.begin(), c.step.end()), tokens(c.tokens.begin(), c.tokens.end());
  w.write_i64("train/step", steps.data(), {n});
  w.attr("units", std::string("optimizer steps (0-based)"), "train/step");
  w.write_i64("train/tokens", tokens.data(), {n});
  w.attr("units", std::string("tokens seen after the step"), "train/tokens");
  put("train/loss", c.loss, "nats per token (mean next-token cross entropy)");
  put("train/lr", c.lr, "learning rate");
  put("train/grad_norm", c.grad_norm, "L2 norm before clipping");
  put("train/time", c.time_s, "seconds of training since the run started, summed over resumed processes");
  std::vector<int64_t> es(c.eval_step.begin(), c.eval_step.end());
  w.write_i64("eval/step", es.data(), {static_cast<int64_t>(es.size())});
  put("eval/loss", c.eval_loss, "nats per token on the validation split");
  if (!c.alpha.empty()) {
    std::vector<double> a;
    for (const auto& row : c.alpha) a.insert(a.end(), row.begin(), row.end());
    w.write_f64("telemetry/alpha", a.data(), {static_cast<int64_t>(c.alpha.size()), static_cast<int64_t>(c.alpha_keys.size())});
    w.attr("keys", join(c.alpha_keys, "\n") + (c.alpha_keys.empty() ? "" : "\n"), "telemetry/alpha");  // a line a key
    w.attr("units", std::string("alpha (Eq. 3) of each quantized operand; rows: telemetry/alpha_step"), "telemetry/alpha");
    put("telemetry/alpha_step", c.alpha_step, "optimizer step");
  }
  const Summaries sum = summaries_of(n, c.loss, c.eval_loss, c.tokens, r.data_train_tokens);
  w.attr("final_loss", sum.final_loss);
  w.attr("mean_loss_last_k", sum.mean_loss_last_k);
  w.attr("last_k", sum.last_k);
  w.attr("final_eval_loss", sum.final_eval_loss);
  w.attr("steps_done", sum.steps_done);
  w.attr("epochs", sum.epochs);
  write_member_attrs(w, r, outcome_attrs());
  w.commit();
}

std::vector<NamedCurve> named_curves(const RunResults& r) {
  std::vector<double> alpha;
  for (const auto& row : r.curves.alpha) alpha.insert(alpha.end(), row.begin(), row.end());
  return {{"train/loss", r.curves.loss, &r.curves.step},
          {"train/grad_norm", r.curves.grad_norm, nullptr},
          {"eval/loss", r.curves.eval_loss, &r.curves.eval_step},
          {"telemetry/alpha", alpha, nullptr}};
}

bool is_run_results(const std::string& path) { return read_h5_string_attrs(path).count("run_name") > 0; }

namespace {

// A results file is named "<run name>-<run id>.h5" and its identity text hashes to its run id: a file
// that holds another run's content under this name, or an identity edited after the run, is refused.
void check_identity(const std::string& path, const RunResults& r) {
  if (!r.run_identity.empty() && sha256_hex(r.run_identity).substr(0, 16) != r.run_id)
    throw Error(path + ": run_id " + r.run_id + " is not the hash of the identity stored with it (" + sha256_hex(r.run_identity).substr(0, 16) +
                "): the file was edited; remove it");
  const std::string base = path.substr(path.find_last_of('/') + 1);
  const size_t dash = base.rfind('-');
  if (dash == std::string::npos || !ends_with(base, ".h5")) return;
  const std::string named = base.substr(dash + 1, base.size() - dash - 4);
  const bool hex16 = named.size() == 16 && named.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (hex16 && !r.run_id.empty() && named != r.run_id)
    throw Error(path + ": named for run id " + named + " but holds run " + r.run_name + " (run id " + r.run_id + "); remove or rename it");
}

// The summaries every report and verdict reads (final_eval_loss, mean_loss_last_k, epochs, ...) are root attributes,
// which the content hash of a file written before `content_scope` (array_io.h) does not cover; each is a function of
// the curves it does cover (epochs with data_train_tokens). A file whose summary is not what its curves give was
// edited after the run: refused. flops_per_token, which a trend's compute also reads, is checked against the run's
// model where a campaign reads it (harness/analysis/campaign_stats.cpp).
void check_summaries(const std::string& path, const RunResults& r, const std::vector<double>& loss, const std::vector<double>& eval_loss,
                     const std::vector<double>& tokens) {
  const auto same = [](double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; };
  const Summaries sum = summaries_of(static_cast<int64_t>(loss.size()), loss, eval_loss, tokens, r.data_train_tokens);
  const std::vector<std::tuple<const char*, double, double>> summaries = {
      {"steps_done", static_cast<double>(r.steps_done), static_cast<double>(sum.steps_done)},
      {"last_k", static_cast<double>(r.last_k), static_cast<double>(sum.last_k)},
      {"final_loss", r.final_loss, sum.final_loss},
      {"mean_loss_last_k", r.mean_loss_last_k, sum.mean_loss_last_k},
      {"final_eval_loss", r.final_eval_loss, sum.final_eval_loss},
      {"epochs", r.epochs, sum.epochs}};
  for (const auto& [name, stored, derived] : summaries)
    if (!same(stored, derived))
      throw Error(path + ": " + name + " " + all_digits(stored) + " is not what its curves give (" + all_digits(derived) +
                  "): the file was edited after the run; remove it (a run trains it again)");
}

}  // namespace

RunResults read_run_results(const std::string& path, bool with_curves) {
  RunResults r;
  r.path = path;
  r.attrs = read_h5_string_attrs(path);
  if (!r.attrs.count("run_name")) throw Error(path + ": not a run's results (no run_name attribute)");
  r.content_verified = verify_h5_content(path);
  // Since schema 3 every results file is written with its hash: one without it was edited.
  if (!r.content_verified && read_h5_numeric_attrs(path).count("schema_version") && read_h5_double_attr(path, "schema_version") >= 3)
    throw Error(path + ": a schema-3 results file without its content_sha256: the file was edited; remove it (a run trains it again)");
  const std::map<std::string, double> num = read_h5_numeric_attrs(path);
  auto d = [&](const char* key, double missing) {
    auto it = num.find(key);
    return it == num.end() ? missing : it->second;
  };
  auto i = [&](const char* key, int64_t missing) { return static_cast<int64_t>(d(key, static_cast<double>(missing))); };
  read_member_attrs(r, num, run_attrs());
  read_member_attrs(r, num, outcome_attrs());
  r.steps_done = i("steps_done", 0);
  r.last_k = i("last_k", 0);
  r.final_loss = d("final_loss", NAN);
  r.mean_loss_last_k = d("mean_loss_last_k", NAN);
  r.final_eval_loss = d("final_eval_loss", NAN);
  r.epochs = d("epochs", NAN);
  check_identity(path, r);
  if (!with_curves && !r.content_verified) return r;
  const std::vector<std::string> datasets = list_h5_datasets(path);
  auto has = [&](const char* name) { return std::find(datasets.begin(), datasets.end(), name) != datasets.end(); };
  if (!with_curves) {
    if (r.content_verified && has("train/loss"))
      check_summaries(path, r, read_h5_f64(path, "train/loss"), has("eval/loss") ? read_h5_f64(path, "eval/loss") : std::vector<double>{},
                      has("train/tokens") ? read_h5_f64(path, "train/tokens") : std::vector<double>{});
    return r;
  }
  RunCurves& c = r.curves;
  for (const auto& col : std::vector<std::pair<const char*, std::vector<double>*>>{
           {"train/step", &c.step}, {"train/tokens", &c.tokens}, {"train/loss", &c.loss}, {"train/lr", &c.lr},
           {"train/grad_norm", &c.grad_norm}, {"train/time", &c.time_s}, {"eval/step", &c.eval_step}, {"eval/loss", &c.eval_loss},
           {"telemetry/alpha_step", &c.alpha_step}})
    if (has(col.first)) *col.second = read_h5_f64(path, col.first);
  if (has("telemetry/alpha")) {
    c.alpha_keys = split(read_h5_string_attrs(path, "telemetry/alpha")["keys"], '\n');
    const std::vector<double> flat = read_h5_f64(path, "telemetry/alpha");
    const size_t width = c.alpha_keys.size();
    for (size_t row = 0; width && (row + 1) * width <= flat.size(); ++row)
      c.alpha.emplace_back(flat.begin() + static_cast<std::ptrdiff_t>(row * width), flat.begin() + static_cast<std::ptrdiff_t>((row + 1) * width));
  }
  if (r.content_verified && has("train/loss")) check_summaries(path, r, c.loss, c.eval_loss, c.tokens);
  return r;
}

}  // namespace ufp4
