#include "harness/plan/packing.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"

namespace ufp4 {

const PackingRow* fastest_packing(const std::vector<PackingRow>& rows, const std::string& model, const std::string& device) {
  const PackingRow* best = nullptr;
  for (const auto& r : rows)
    if (r.model == model && (device.empty() || r.device == device) && (!best || r.tokens_per_s > best->tokens_per_s)) best = &r;
  return best;
}

double packed_tokens_per_s(const std::vector<PackingRow>& rows, const std::string& model, int per_gpu, bool mps, const std::string& device) {
  for (const auto& r : rows)
    if (r.model == model && r.per_gpu == per_gpu && r.mps == mps && (device.empty() || r.device == device)) return r.tokens_per_s;
  return 0;
}

std::string packed_estimate(const std::vector<std::pair<std::string, double>>& model_tokens, const std::string& table) {
  const std::vector<PackingRow> rows = load_packing(table);
  std::map<std::string, double> tokens;
  for (const auto& [m, t] : model_tokens) tokens[m] += t;
  std::ostringstream os;
  os.precision(3);
  for (const auto& [model, t] : tokens) {
    const PackingRow* best = fastest_packing(rows, model);
    if (t <= 0) continue;
    if (!best) {  // said, not dropped: a sum over the listed models would otherwise read as the whole
      os << "  " << model << ": " << t << " tokens, no packing measured for this model (tools/gpu-packing.sh)\n";
      continue;
    }
    const double tps = best->tokens_per_s;
    os << "  " << model << ": " << t << " tokens at " << best->per_gpu << " run(s) a GPU" << (best->mps ? " under MPS" : "") << " (" << tps / 1e6
       << "M tokens/s a GPU measured): " << t / tps / 3600 << " GPU-hours\n";
  }
  return os.str();
}

std::string this_gpu_name() { return first_output_line("nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null"); }

namespace {

// The rows of this machine's GPU when the table has any, else the device "" (rows of any GPU).
std::string table_device(const std::vector<PackingRow>& rows) {
  const std::string device = this_gpu_name();  // the device the table's rows must match
  for (const auto& r : rows)
    if (r.device == device) return device;
  return "";
}

}  // namespace

namespace {

// The smallest of the models' fastest K among `rows` (1 for a model they lack), and the model that sets it.
int smallest_fastest_k(const std::vector<PackingRow>& rows, const std::vector<std::string>& models, const std::string& device, std::string& limit) {
  int k = 0;
  for (const auto& m : models) {
    const PackingRow* best = fastest_packing(rows, m, device);
    const int km = best ? best->per_gpu : 1;
    if (k == 0 || km < k) k = km, limit = m;
  }
  return k == 0 ? 1 : k;
}

// Whether every model's row under MPS at K is faster than its row without (false where either is missing).
bool mps_faster_in(const std::vector<PackingRow>& rows, const std::vector<std::string>& models, int per_gpu, const std::string& device) {
  for (const auto& m : models) {
    const double with = packed_tokens_per_s(rows, m, per_gpu, true, device), without = packed_tokens_per_s(rows, m, per_gpu, false, device);
    if (with <= 0 || without <= 0 || with <= without) return false;
  }
  return !models.empty();
}

}  // namespace

PackingChoice choose_packing(const std::vector<std::string>& models, const std::string& table, bool allow_mps) {
  if (!file_exists(table)) {
    PackingChoice none;
    none.table_missing = true;
    none.why = "1 run(s) a GPU: no packing table at " + table + " (tools/gpu-packing.sh measures one; --per-gpu K sets it by hand)";
    return none;
  }
  std::vector<PackingRow> rows = load_packing(table);
  const std::string device = table_device(rows);
  // A GPU holds runs of several models at once: the smallest of their fastest K. Under MPS only where
  // every model was measured faster under it at that K; else K again from the rows without MPS.
  PackingChoice c;
  std::string limit;
  c.per_gpu = smallest_fastest_k(rows, models, device, limit);
  c.mps = allow_mps && c.per_gpu > 1 && mps_faster_in(rows, models, c.per_gpu, device);
  if (!c.mps) {
    rows.erase(std::remove_if(rows.begin(), rows.end(), [](const PackingRow& r) { return r.mps; }), rows.end());
    c.per_gpu = smallest_fastest_k(rows, models, device, limit);
  }
  const bool measured = fastest_packing(rows, limit, device) != nullptr;
  c.why = std::to_string(c.per_gpu) + " run(s) a GPU" + (c.mps ? " under MPS" : "") + ": " +
          (measured ? "the fastest measured for " + limit + (allow_mps ? "" : " without MPS") : limit + " is not measured") + " (" + table +
          (device.empty() ? ", rows of any GPU" : ", " + device) + ")";
  return c;
}

bool mps_measured_faster(const std::vector<std::string>& models, int per_gpu, const std::string& table) {
  const std::vector<PackingRow> rows = load_packing(table);
  return mps_faster_in(rows, models, per_gpu, table_device(rows));
}

}  // namespace ufp4
