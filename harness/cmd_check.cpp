// `ufp4 check RESULT... --reference DIR`: pointwise comparison of loss curves with committed
// references. A point passes when |loss - ref| <= atol + rtol * |ref|. The default (rtol 2e-3) absorbs
// summation-order differences between CPUs and BLAS builds over ~100 CI steps while catching any change
// to the numerics, which moves 4-bit curves by far more.
// --exact (GPU references, deterministic runs): on the device model that made the reference, every
// point of train/loss, train/grad_norm, eval/loss and telemetry/alpha and the final weights' SHA-256
// must match bit for bit; on another device model the tolerance above applies (other kernels, other
// summation orders), and the output says so.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <cstdio>
#include <iostream>

#include "harness/array_io.h"
#include "harness/cli.h"
#include "harness/error.h"
#include "harness/fs.h"

namespace ufp4 {

namespace {

// Bit-exact comparison of one result with its reference; returns the number of failures.
int check_exact(const std::string& name, const std::string& f, const std::string& ref, std::map<std::string, std::string>& fa,
                std::map<std::string, std::string>& ra) {
  int failures = 0;
  const auto datasets = list_h5_datasets(ref);
  for (const char* ds : {"train/loss", "train/grad_norm", "eval/loss", "telemetry/alpha"}) {
    const bool in_ref = std::find(datasets.begin(), datasets.end(), ds) != datasets.end();
    if (!in_ref) continue;
    std::vector<double> a, b = read_h5_f64(ref, ds);
    try {
      a = read_h5_f64(f, ds);
    } catch (const Error&) {
      std::printf("FAIL %s: %s is missing (the reference has %zu values)\n", name.c_str(), ds, b.size());
      ++failures;
      continue;
    }
    size_t bad = a.size() == b.size() ? a.size() : 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()) && bad == a.size(); ++i)
      if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) bad = i;
    if (a.size() != b.size()) {
      std::printf("FAIL %s: %s has %zu values, the reference %zu\n", name.c_str(), ds, a.size(), b.size());
      ++failures;
    } else if (bad != a.size()) {
      std::printf("FAIL %s: %s differs first at index %zu: %.17g vs reference %.17g (bit-exact required on %s)\n", name.c_str(), ds, bad,
                  a[bad], b[bad], ra["device_name"].c_str());
      ++failures;
    } else {
      std::printf("ok   %s: %s, %zu values bit-identical\n", name.c_str(), ds, a.size());
    }
  }
  if (!ra["weights_sha256"].empty()) {
    if (fa["weights_sha256"] != ra["weights_sha256"]) {
      std::printf("FAIL %s: final weights differ (SHA-256 %s vs reference %s)\n", name.c_str(), fa["weights_sha256"].substr(0, 16).c_str(),
                  ra["weights_sha256"].substr(0, 16).c_str());
      ++failures;
    } else {
      std::printf("ok   %s: final weights bit-identical (SHA-256 %s)\n", name.c_str(), ra["weights_sha256"].substr(0, 16).c_str());
    }
  }
  return failures;
}

}  // namespace

int cmd_check(const std::vector<std::string>& args) {
  std::vector<std::string> results;
  std::string reference;
  double rtol = 2e-3, atol = 0.0;
  bool exact = false;
  po::options_description d("options");
  d.add_options()
      ("results", po::value(&results)->multitoken(), "result files (.h5) or folders of them")
      ("reference", po::value(&reference)->required(), "folder of reference results (matched by run name)")
      ("rtol", po::value(&rtol)->default_value(2e-3), "relative tolerance per point")
      ("atol", po::value(&atol)->default_value(0.0), "absolute tolerance per point (nats)")
      ("exact", po::bool_switch(&exact), "bit-exact on the reference's device model (curves, telemetry, final weights); the tolerance elsewhere");
  po::positional_options_description pos;
  pos.add("results", -1);
  auto vm = parse_command("check", "RESULT ... --reference DIR [--exact] [--rtol R] [--atol A]", d, args, &pos);
  if (!vm) return 0;
  std::vector<std::string> files;
  for (const auto& r : results) {
    if (is_dir(r)) walk_files(r, ".h5", files);
    else if (file_exists(r)) files.push_back(r);
    else throw Error("check: '" + r + "' not found");
  }
  if (files.empty()) throw Error("check: no result files given");
  std::vector<std::string> refs;
  if (!is_dir(reference)) throw Error("check: --reference '" + reference + "' is not a folder");
  walk_files(reference, ".h5", refs);
  int failures = 0;
  for (const auto& f : files) {
    const std::string name = read_h5_string_attrs(f)["run_name"];
    std::string ref;
    for (const auto& r : refs)
      if (read_h5_string_attrs(r)["run_name"] == name) ref = r;
    if (ref.empty()) {
      std::cout << "FAIL " << name << ": no reference with this run name in " << reference << "\n";
      ++failures;
      continue;
    }
    if (exact) {
      auto fa = read_h5_string_attrs(f), ra = read_h5_string_attrs(ref);
      if (!fa["device_name"].empty() && fa["device_name"] == ra["device_name"]) {
        failures += check_exact(name, f, ref, fa, ra);
        continue;
      }
      std::printf("note %s: made on '%s', the reference on '%s': checked within the tolerance, not bit for bit\n", name.c_str(),
                  fa["device_name"].c_str(), ra["device_name"].c_str());
    }
    for (const char* ds : {"train/loss", "eval/loss"}) {
      ArrayF32 a = read_h5_f32(f, ds), b = read_h5_f32(ref, ds);
      if (a.data.size() != b.data.size()) {
        std::cout << "FAIL " << name << ": " << ds << " has " << a.data.size() << " points, the reference " << b.data.size() << "\n";
        ++failures;
        break;
      }
      ArrayF32 steps = read_h5_f32(f, std::string(ds).substr(0, std::string(ds).find('/')) + "/step");
      bool ok = true;
      for (size_t i = 0; i < a.data.size(); ++i) {
        const double tol = atol + rtol * std::fabs(b.data[i]);
        if (!(std::fabs(a.data[i] - b.data[i]) <= tol)) {
          std::printf("FAIL %s: %s at step %.0f: %.6f vs reference %.6f (tolerance %.2e)\n", name.c_str(), ds, steps.data[i], a.data[i],
                      b.data[i], tol);
          ok = false;
          ++failures;
          break;
        }
      }
      if (ok) std::printf("ok   %s: %s, %zu points within %.1e + %.1e x |ref|\n", name.c_str(), ds, a.data.size(), atol, rtol);
      if (!ok) break;
    }
  }
  return failures ? kExitRuntime : 0;
}

}  // namespace ufp4
