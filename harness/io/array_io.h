// Reading and writing arrays: NumPy .npy files and HDF5 datasets (HDF5 C API), with atomic
// writes (a temporary file renamed on success, nothing half-written on failure).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/non_copyable.h"

namespace ufp4 {

struct ArrayF32 {
  std::vector<int64_t> shape;
  std::vector<float> data;
  int64_t numel() const;
};

ArrayF32 read_npy(const std::string& path);  // <f4, <f8 or <f2, C order
void write_npy(const std::string& path, const ArrayF32& a);

struct H5FileImage;  // the file's bytes as they stand when it closes (array_io.cpp)

// Builds the file in memory; commit() writes it crash-safely (common/atomic_file.h). Nothing is
// written without commit().
class H5Writer : NonCopyable {
 public:
  explicit H5Writer(const std::string& path);
  ~H5Writer();
  void write_f32(const std::string& name, const float* data, const std::vector<int64_t>& shape);
  void write_f64(const std::string& name, const double* data, const std::vector<int64_t>& shape);
  void write_u8(const std::string& name, const uint8_t* data, const std::vector<int64_t>& shape);
  void write_i64(const std::string& name, const int64_t* data, const std::vector<int64_t>& shape);
  // Attributes on the root group, or on a dataset when `object` is given.
  void attr(const std::string& key, const std::string& value, const std::string& object = "/");
  void attr(const std::string& key, double value, const std::string& object = "/");
  void attr(const std::string& key, int64_t value, const std::string& object = "/");
  // Stamps the file with `content_sha256` (h5_content_sha256 of everything written) and writes it.
  void commit();

 private:
  std::string path_;
  int64_t file_ = -1;
  bool committed_ = false;
  std::unique_ptr<H5FileImage> image_;
};

// Reads a dataset (any float or integer type) as FP32. Path "file.h5" with a dataset name.
ArrayF32 read_h5_f32(const std::string& path, const std::string& dataset);
std::vector<double> read_h5_f64(const std::string& path, const std::string& dataset);  // any numeric type, as FP64
std::vector<uint8_t> read_h5_u8(const std::string& path, const std::string& dataset, std::vector<int64_t>* shape = nullptr);
std::map<std::string, std::string> read_h5_string_attrs(const std::string& path, const std::string& object = "/");
std::map<std::string, double> read_h5_numeric_attrs(const std::string& path, const std::string& object = "/");  // scalar ones
// Every dataset in the file, full paths without the leading "/", in name order.
std::vector<std::string> list_h5_datasets(const std::string& path);
double read_h5_double_attr(const std::string& path, const std::string& key, const std::string& object = "/");

// The SHA-256 of a file's content, independent of HDF5's layout: every object's path, every
// attribute's name and value, every dataset's type, shape and values, in name order; the root
// attribute `content_sha256` (where H5Writer stores this hash) left out. The root group's attributes
// count where the root says so (`content_scope`, which H5Writer writes). A file written before it is
// checked as it was hashed: without the root's attributes (HDF5 1.10), or with them (1.12 and later).
std::string h5_content_sha256(const std::string& path);
// Checks a file against the hash it carries: throws Error naming the file when the content does not
// match it (damaged, or edited after it was written). Returns false when the file carries no hash
// (written before files were stamped), true when it matches.
bool verify_h5_content(const std::string& path);

}  // namespace ufp4
