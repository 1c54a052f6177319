// `ufp4 report NAME`: renders a reproduction report (Markdown, SVG figures under figures/ beside it).
#include <algorithm>
#include <iostream>
#include <map>

#include "common/error.h"
#include "common/fs.h"
#include "harness/cli/cli.h"
#include "harness/report/report.h"

namespace ufp4 {

int cmd_report(const std::vector<std::string>& args) {
  const std::string allowed = "table1, table2, table3, figure8, figure10, analysis, figure9, bench";
  std::string name, out, tensors, fits;
  std::vector<std::string> dirs, chains;
  int64_t k = 200;
  po::options_description d("options");
  d.add_options()
      ("name", po::value(&name), "table1 | table2 | table3 | figure8 | figure10 | analysis | figure9 | bench")
      ("results", po::value(&dirs)->multitoken(), "folders of run results (default: the campaign's, e.g. results/table2 and results/figure8)")
      ("last-k", po::value(&k)->default_value(200), "steps averaged at the end of each run")
      ("tensors", po::value(&tensors), "analysis: output of `ufp4 analyze tensors` (default results/analysis/tensors-dense113m.h5)")
      ("chain", po::value(&chains)->multitoken(), "analysis: outputs of `ufp4 analyze chain` (default results/analysis/chain-*.h5)")
      ("fits", po::value(&fits), "figure9: output of `ufp4 fit` (default results/fits/figure9-proxy.h5)")
      ("out", po::value(&out), "write the Markdown here (default: reports/NAME.md; - for stdout, without figures)");
  po::positional_options_description pos;
  pos.add("name", 1);
  auto vm = parse_command("report", "NAME [--results DIR...] [--out FILE]", d, args, &pos);
  if (!vm) return 0;
  const std::string root = UFP4_SOURCE_DIR;
  if (out.empty()) out = root + "/reports/" + name + ".md";
  const std::string figures = out == "-" ? "" : (out.find('/') == std::string::npos ? "." : out.substr(0, out.rfind('/'))) + "/figures";
  // Each campaign's results folders (Table 2 and Figure 10 share their ufp4, bf16 and e2m1_ref runs with
  // Figure 8); reports of campaigns not yet re-run read results/proxy.
  if (dirs.empty()) {
    const std::map<std::string, std::vector<std::string>> campaign = {
        {"figure8", {"figure8"}}, {"table2", {"table2", "figure8"}}, {"figure10", {"figure10", "figure8"}}, {"table3", {"table3"}}};
    for (const auto& d : campaign.count(name) ? campaign.at(name) : std::vector<std::string>{"proxy"}) dirs.push_back(root + "/results/" + d);
  }
  std::string md;
  if (name == "table1") md = report_table1(root);
  else if (name == "figure8") md = report_figure8(root, dirs, k, figures);
  else if (name == "table2") md = report_table2(root, dirs, k, figures);
  else if (name == "table3") md = report_table3(root, dirs, k, figures);
  else if (name == "figure10") md = report_figure10(root, dirs, k, figures);
  else if (name == "analysis") {
    if (tensors.empty()) tensors = root + "/results/analysis/tensors-dense113m.h5";
    if (chains.empty()) {
      std::vector<std::string> files;
      if (is_dir(root + "/results/analysis")) walk_files(root + "/results/analysis", ".h5", files);
      for (const auto& f : files)
        if (f.find("/chain-") != std::string::npos) chains.push_back(f);
      std::sort(chains.begin(), chains.end());
    }
    md = report_analysis(root, tensors, chains, figures);
  } else if (name == "figure9") {
    md = report_figure9(root, fits.empty() ? root + "/results/fits/figure9-proxy.h5" : fits, figures);
  } else if (name == "bench") {
    md = report_bench(root, dirs == std::vector<std::string>{root + "/results/proxy"} ? root + "/results/bench" : dirs.front(), figures);
  } else {
    throw Error("report: unknown report '" + name + "' (allowed: " + allowed + ")");
  }
  if (out == "-") std::cout << md;
  else {
    write_text_atomically(out, md);
    std::cout << md << "\nwritten to " << out << "\n";
  }
  return 0;
}

}  // namespace ufp4
