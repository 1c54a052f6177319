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
#include <set>
#include <cstdio>
#include <iostream>

#include "common/error.h"
#include "common/fs.h"
#include "harness/cli/cli.h"
#include "harness/io/run_compare.h"
#include "harness/io/run_results.h"

namespace ufp4 {

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
  std::vector<RunResults> ref_runs;
  for (const auto& r : refs) ref_runs.push_back(read_run_results(r));
  for (const auto& file : files) {
    const RunResults f = read_run_results(file);
    const std::string& name = f.run_name;
    // A run name may have references made on several GPU models: the one of this result's model first.
    const RunResults* ref = nullptr;
    for (const auto& r : ref_runs)
      if (r.run_name == name && (!ref || (r.device_name == f.device_name && ref->device_name != f.device_name))) ref = &r;
    if (!ref) {
      std::cout << "FAIL " << name << ": no reference with this run name in " << reference << "\n";
      ++failures;
      continue;
    }
    if (exact) {
      if (!f.device_name.empty() && f.device_name == ref->device_name) {
        failures += compare_runs_exact(name, f, *ref);
        continue;
      }
      std::printf("note %s: made on '%s', the reference on '%s': checked within the tolerance, not bit for bit\n", name.c_str(),
                  f.device_name.c_str(), ref->device_name.c_str());
    }
    // Within the tolerance, on the curves as FP32 (as references have always been compared).
    const auto ours = named_curves(f), theirs = named_curves(*ref);
    for (size_t c = 0; c < ours.size(); ++c) {
      if (!ours[c].steps) continue;  // the loss curves
      const char* ds = ours[c].name.c_str();
      const std::vector<double>*a = &ours[c].values, *b = &theirs[c].values, *steps = ours[c].steps;
      if (a->size() != b->size()) {
        std::cout << "FAIL " << name << ": " << ds << " has " << a->size() << " points, the reference " << b->size() << "\n";
        ++failures;
        break;
      }
      bool ok = true;
      for (size_t i = 0; i < a->size(); ++i) {
        const float x = static_cast<float>((*a)[i]), y = static_cast<float>((*b)[i]);
        const double tol = atol + rtol * std::fabs(y);
        if (!(std::fabs(x - y) <= tol)) {
          std::printf("FAIL %s: %s at step %.0f: %.6f vs reference %.6f (tolerance %.2e)\n", name.c_str(), ds, (*steps)[i], x, y, tol);
          ok = false;
          ++failures;
          break;
        }
      }
      if (ok) std::printf("ok   %s: %s, %zu points within %.1e + %.1e x |ref|\n", name.c_str(), ds, a->size(), atol, rtol);
      if (!ok) break;
    }
  }
  // Every reference's run must have been among the files checked: a missing run fails the check.
  std::set<std::string> checked;
  for (const auto& file : files) checked.insert(read_run_results(file, /*with_curves=*/false).run_name);
  std::set<std::string> named;
  for (const auto& r : ref_runs)
    if (!checked.count(r.run_name) && named.insert(r.run_name).second) {
      std::printf("FAIL %s: the reference's run has no result among the files checked (%s)\n", r.run_name.c_str(), r.path.c_str());
      ++failures;
    }
  return failures ? kExitRuntime : 0;
}

}  // namespace ufp4
