// A benchmark's rows written as HDF5 columns: one dataset a field under a group, each with its units
// where they are not obvious. The writers declare their columns once instead of a vector a field.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/io/array_io.h"

namespace ufp4 {

template <typename Row>
class RowColumns {
 public:
  RowColumns& f32(const std::string& name, std::function<double(const Row&)> get, const std::string& units = "") {
    f32_.push_back({name, units, std::move(get)});
    return *this;
  }
  RowColumns& i64(const std::string& name, std::function<int64_t(const Row&)> get, const std::string& units = "") {
    i64_.push_back({name, units, std::move(get)});
    return *this;
  }

  // group/<name> for every column, in declaration order (FP32 columns first, then integers).
  void write(H5Writer& w, const std::string& group, const std::vector<Row>& rows) const {
    const std::vector<int64_t> n = {static_cast<int64_t>(rows.size())};
    for (const auto& c : f32_) {
      std::vector<float> v;
      for (const auto& r : rows) v.push_back(static_cast<float>(c.get(r)));
      w.write_f32(group + "/" + c.name, v.data(), n);
      if (!c.units.empty()) w.attr("units", c.units, group + "/" + c.name);
    }
    for (const auto& c : i64_) {
      std::vector<int64_t> v;
      for (const auto& r : rows) v.push_back(c.get(r));
      w.write_i64(group + "/" + c.name, v.data(), n);
      if (!c.units.empty()) w.attr("units", c.units, group + "/" + c.name);
    }
  }

 private:
  template <typename T>
  struct Column {
    std::string name, units;
    std::function<T(const Row&)> get;
  };
  std::vector<Column<double>> f32_;
  std::vector<Column<int64_t>> i64_;
};

}  // namespace ufp4
