// A table of numbers whose rows carry text labels: one dataset [rows, columns] (FP32, or FP64 where
// asked), the labels tab-separated a line a row in its "rows" attribute and the column names in its
// "columns" attribute. The analysis files use it (`ufp4 analyze tensors`: tensors, bins, gemms, with
// rows labelled layer, family, operand or GEMM, grid, transform; `ufp4 analyze bias`: bias, labelled
// density, transform, method), written by harness/analysis and read by the analysis report.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "harness/io/array_io.h"

namespace ufp4 {

struct LabelledTable {
  std::string columns;                           // the column names (free text, e.g. "nmse,sqnr_db")
  int64_t width = 0;                             // numbers a row
  std::vector<std::vector<std::string>> labels;  // a row's labels
  std::vector<double> values;                    // row-major, labels.size() x width

  explicit LabelledTable(int64_t width = 0, std::string columns = "") : columns(std::move(columns)), width(width) {}
  size_t rows() const { return labels.size(); }
  double at(size_t row, size_t col) const { return values[row * static_cast<size_t>(width) + col]; }
  // Appends a row; Error when `numbers` is not `width` long.
  void add(std::vector<std::string> row_labels, const std::vector<double>& numbers);
};

void write_labelled_table(H5Writer& w, const std::string& dataset, const LabelledTable& t, bool fp64 = false);
// Error naming the file and dataset when the labels and the data differ in rows.
LabelledTable read_labelled_table(const std::string& path, const std::string& dataset);

}  // namespace ufp4
