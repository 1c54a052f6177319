// The rows of a result file as HDF5 columns, declared once for its writer and its reader: the row's
// identity as text fields joined by a separator (one line a row, in an attribute of the first
// column), then one dataset a number field under a group, with its units where they are not obvious.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/text.h"
#include "harness/io/array_io.h"

namespace ufp4 {

template <typename Row>
class RowTable {
 public:
  // `names_attr`: the attribute of the first column that holds the rows' identities.
  explicit RowTable(std::string group, std::string names_attr = "rows", char separator = '|')
      : group_(std::move(group)), names_attr_(std::move(names_attr)), separator_(separator) {}

  RowTable& key(const std::string& name, std::string Row::*field) {
    keys_.push_back({name, "", field});
    return *this;
  }
  RowTable& f32(const std::string& name, double Row::*field, const std::string& units = "") {
    f32_.push_back({name, units, field});
    return *this;
  }
  RowTable& i64(const std::string& name, int64_t Row::*field, const std::string& units = "") {
    i64_.push_back({name, units, field});
    return *this;
  }

  // group/<name> for every column in declaration order (FP32 columns first, then integers), the
  // identities on the first FP32 column with their format ("model|impl|...").
  void write(H5Writer& w, const std::vector<Row>& rows) const {
    const std::vector<int64_t> n = {static_cast<int64_t>(rows.size())};
    for (const auto& c : f32_) {
      std::vector<float> v;
      for (const auto& r : rows) v.push_back(static_cast<float>(r.*c.field));
      write_column(w, c, [&](const std::string& d) { w.write_f32(d, v.data(), n); });
    }
    for (const auto& c : i64_) {
      std::vector<int64_t> v;
      for (const auto& r : rows) v.push_back(r.*c.field);
      write_column(w, c, [&](const std::string& d) { w.write_i64(d, v.data(), n); });
    }
    std::string names, format;
    for (const auto& r : rows) {
      std::vector<std::string> f;
      for (const auto& k : keys_) f.push_back(r.*k.field);
      names += join(f, std::string(1, separator_)) + "\n";
    }
    for (const auto& k : keys_) format += (format.empty() ? "" : std::string(1, separator_)) + k.name;
    w.attr(names_attr_, names, first_column());
    if (keys_.size() > 1) w.attr("row_format", format, first_column());
  }

  // Every row of `path` (its content hash checked). Identities with fewer fields than declared leave
  // the last ones empty (files written before a field was added); no rows, a column shorter than the
  // rows, or a file without this table is an error naming the file and the dataset.
  std::vector<Row> read(const std::string& path) const {
    verify_h5_content(path);
    const auto names = split(read_h5_string_attrs(path, first_column())[names_attr_], '\n');
    std::vector<Row> rows;
    for (const auto& line : names) {
      if (line.empty()) continue;
      const auto f = split(line, separator_);
      Row r;
      for (size_t k = 0; k < keys_.size() && k < f.size(); ++k) r.*keys_[k].field = f[k];
      rows.push_back(r);
    }
    if (rows.empty()) throw Error(path + ": no rows in " + first_column());
    for (const auto& c : f32_) fill(path, c, rows, [](double v) { return v; });
    for (const auto& c : i64_) fill(path, c, rows, [](double v) { return static_cast<int64_t>(v); });
    return rows;
  }

 private:
  template <typename T>
  struct Column {
    std::string name, units;
    T Row::*field;
  };
  std::string first_column() const { return group_ + "/" + f32_.front().name; }
  template <typename C, typename WriteData>
  void write_column(H5Writer& w, const C& c, WriteData write_data) const {
    write_data(group_ + "/" + c.name);
    if (!c.units.empty()) w.attr("units", c.units, group_ + "/" + c.name);
  }
  template <typename T, typename Cast>
  void fill(const std::string& path, const Column<T>& c, std::vector<Row>& rows, Cast cast) const {
    const std::vector<double> v = read_h5_f64(path, group_ + "/" + c.name);
    if (v.size() < rows.size())
      throw Error(path + ": " + group_ + "/" + c.name + " has " + std::to_string(v.size()) + " values for " + std::to_string(rows.size()) + " rows");
    for (size_t i = 0; i < rows.size(); ++i) rows[i].*c.field = cast(v[i]);
  }

  std::string group_, names_attr_;
  char separator_;
  std::vector<Column<std::string>> keys_;
  std::vector<Column<double>> f32_;
  std::vector<Column<int64_t>> i64_;
};

}  // namespace ufp4
