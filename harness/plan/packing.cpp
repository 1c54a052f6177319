#include "harness/plan/packing.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"

namespace ufp4 {

std::vector<PackingRow> load_packing(const std::string& csv) {
  std::vector<PackingRow> rows;
  std::ifstream in(csv);
  if (!in) return rows;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (n == 1 || line.empty()) continue;  // the header
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) f.push_back(c);
    try {
      if (f.size() < 6) throw std::invalid_argument("columns");
      rows.push_back({f[0], f[1], std::stoi(f[2]), std::stod(f[5])});
    } catch (const std::exception&) {
      throw Error(csv + ":" + std::to_string(n) + ": expected device,model,per_gpu,runs,steps_each,tokens_per_s_sum,... (the header's columns)");
    }
  }
  return rows;
}

int fastest_per_gpu(const std::vector<PackingRow>& rows, const std::string& model, const std::string& device) {
  int best = 0;
  double tps = 0;
  for (const auto& r : rows)
    if (r.model == model && (device.empty() || r.device == device) && r.tokens_per_s > tps) best = r.per_gpu, tps = r.tokens_per_s;
  return best;
}

double packed_tokens_per_s(const std::vector<PackingRow>& rows, const std::string& model, int per_gpu, const std::string& device) {
  for (const auto& r : rows)
    if (r.model == model && r.per_gpu == per_gpu && (device.empty() || r.device == device)) return r.tokens_per_s;
  return 0;
}

std::string packed_estimate(const std::vector<std::pair<std::string, double>>& model_tokens, const std::string& table) {
  const std::vector<PackingRow> rows = load_packing(table);
  std::map<std::string, double> tokens;
  for (const auto& [m, t] : model_tokens) tokens[m] += t;
  std::ostringstream os;
  os.precision(3);
  for (const auto& [model, t] : tokens) {
    const int k = fastest_per_gpu(rows, model);
    if (k < 1 || t <= 0) continue;
    const double tps = packed_tokens_per_s(rows, model, k);
    os << "  " << model << ": " << t << " tokens at " << k << " run(s) a GPU (" << tps / 1e6 << "M tokens/s a GPU measured): " << t / tps / 3600
       << " GPU-hours\n";
  }
  return os.str();
}

namespace {

// The first GPU's name as nvidia-smi gives it ("" without one): the device the table's rows must match.
std::string this_gpu() {
  std::string name;
  if (FILE* p = ::popen("nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null", "r")) {
    char buf[256];
    if (std::fgets(buf, sizeof buf, p)) name = buf;
    ::pclose(p);
  }
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return name;
}

}  // namespace

int choose_per_gpu(const std::vector<std::string>& models, const std::string& table, std::string& why) {
  const std::vector<PackingRow> rows = load_packing(table);
  std::string device = this_gpu();
  bool measured_here = false;
  for (const auto& r : rows) measured_here = measured_here || r.device == device;
  if (!measured_here) device.clear();  // not measured on this GPU: the rows of any
  // A GPU holds runs of several models at once: the smallest of their fastest K, 1 for a model not measured.
  std::map<std::string, int> best;
  for (const auto& m : models) best[m] = std::max(1, fastest_per_gpu(rows, m, device));
  int k = 0;
  std::string limit;
  for (const auto& [m, b] : best)
    if (k == 0 || b < k) k = b, limit = m;
  if (k == 0) k = 1;
  const bool measured = fastest_per_gpu(rows, limit, device) > 0;
  why = std::to_string(k) + " run(s) a GPU: " +
        (measured ? "the fastest measured for " + limit : limit + " is not measured") + " (" + table + (device.empty() ? ", rows of any GPU" : ", " + device) + ")";
  return k;
}

}  // namespace ufp4
