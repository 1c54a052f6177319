// Every report `ufp4 report NAME` renders, in one table: its name, what it reads, whether it is an
// archived campaign's (rendered into reports/archive/ with a banner), its default inputs, and its
// renderer. The command line, its help text and the Makefile's `make report` list are checked against
// this table (tests/test_cli.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ufp4 {

// The command line's inputs, resolved: each renderer reads the ones it needs.
struct ReportInputs {
  std::string root;       // the checkout
  std::string campaign;   // a campaign file: the report renders from its run set
  std::vector<std::string> dirs;    // folders of run results
  int64_t last_k = 200;   // folder reports: steps averaged at the end of each run
  std::string tensors, fits;
  std::vector<std::string> chains;
  std::string figures;    // where figures are drawn ("" for none)
};

struct ReportEntry {
  std::string name;
  std::string reads;                        // for the help text
  std::string campaign;                     // its registered campaign, rendered by default ("" none)
  std::vector<std::string> archived_dirs;   // the archived campaign's folders (below the checkout)
  bool archived = false;                    // without a campaign, an archived report (reports/archive/, a banner)
  std::function<std::string(const ReportInputs&)> render;  // from folders, fits or captures (campaigns: report_campaign)
  std::string own_inputs_name{};  // its file name when rendered from inputs given here, where a campaign report takes
                                // reports/NAME.md ("": NAME)
  bool every_campaign = false;   // reads the registered campaigns itself (--campaign narrows it to one)
};

const std::vector<ReportEntry>& report_registry();
// The entry of `name`; throws Error naming the allowed names.
const ReportEntry& report_entry(const std::string& name);
std::string report_names(const std::string& separator = ", ");

}  // namespace ufp4
