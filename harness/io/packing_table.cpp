#include "harness/io/packing_table.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "common/error.h"

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
      if (f.size() < 6 || (f.size() > 8 && f[8] != "0" && f[8] != "1")) throw std::invalid_argument("columns");
      rows.push_back({f[0], f[1], std::stoi(f[2]), std::stod(f[5]), f.size() > 8 && f[8] == "1"});
    } catch (const std::exception&) {
      throw Error(csv + ":" + std::to_string(n) +
                  ": expected device,model,per_gpu,runs,steps_each,tokens_per_s_sum,tokens_per_s_each_mean,wall_s[,mps: 0 or 1] (the header's columns)");
    }
  }
  return rows;
}

}  // namespace ufp4
