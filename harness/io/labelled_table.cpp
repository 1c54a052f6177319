#include "harness/io/labelled_table.h"

#include "common/error.h"
#include "common/text.h"

namespace ufp4 {

void LabelledTable::add(std::vector<std::string> row_labels, const std::vector<double>& numbers) {
  if (static_cast<int64_t>(numbers.size()) != width)
    throw Error("labelled table: a row of " + std::to_string(numbers.size()) + " numbers in a table of " + std::to_string(width) + " columns");
  labels.push_back(std::move(row_labels));
  values.insert(values.end(), numbers.begin(), numbers.end());
}

void write_labelled_table(H5Writer& w, const std::string& dataset, const LabelledTable& t, bool fp64) {
  const std::vector<int64_t> shape = {static_cast<int64_t>(t.rows()), t.width};
  if (fp64) {
    w.write_f64(dataset, t.values.data(), shape);
  } else {
    const std::vector<float> f(t.values.begin(), t.values.end());
    w.write_f32(dataset, f.data(), shape);
  }
  std::string rows;
  for (const auto& l : t.labels) rows += join(l, "\t") + "\n";
  w.attr("rows", rows, dataset);
  w.attr("columns", t.columns, dataset);
}

LabelledTable read_labelled_table(const std::string& path, const std::string& dataset) {
  const ArrayF32 shape_probe = read_h5_f32(path, dataset);
  LabelledTable t(shape_probe.shape.size() > 1 ? shape_probe.shape[1] : 1);
  auto attrs = read_h5_string_attrs(path, dataset);
  t.columns = attrs["columns"];
  t.values = read_h5_f64(path, dataset);
  for (const auto& line : split(attrs["rows"], '\n', /*skip_empty=*/true)) t.labels.push_back(split(line, '\t'));
  if (t.rows() * static_cast<size_t>(t.width) != t.values.size())
    throw Error(path + ": " + dataset + ": " + std::to_string(t.rows()) + " row labels for " + std::to_string(t.values.size()) + " numbers in rows of " +
                std::to_string(t.width));
  return t;
}

}  // namespace ufp4
