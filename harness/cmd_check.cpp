// `ufp4 check RESULT... --reference DIR`: pointwise comparison of loss curves with committed
// references. A point passes when |loss - ref| <= atol + rtol * |ref|. The default (rtol 2e-3) absorbs
// summation-order differences between CPUs and BLAS builds over ~100 CI steps while catching any change
// to the numerics, which moves 4-bit curves by far more; GPU references should be checked against
// runs on the same GPU type.
#include <cmath>
#include <cstdio>
#include <iostream>

#include "harness/array_io.h"
#include "harness/cli.h"
#include "harness/error.h"
#include "harness/fs.h"

namespace ufp4 {

int cmd_check(const std::vector<std::string>& args) {
  std::vector<std::string> results;
  std::string reference;
  double rtol = 2e-3, atol = 0.0;
  po::options_description d("options");
  d.add_options()
      ("results", po::value(&results)->multitoken(), "result files (.h5) or folders of them")
      ("reference", po::value(&reference)->required(), "folder of reference results (matched by run name)")
      ("rtol", po::value(&rtol)->default_value(2e-3), "relative tolerance per point")
      ("atol", po::value(&atol)->default_value(0.0), "absolute tolerance per point (nats)");
  po::positional_options_description pos;
  pos.add("results", -1);
  auto vm = parse_command("check", "RESULT ... --reference DIR [--rtol R] [--atol A]", d, args, &pos);
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
