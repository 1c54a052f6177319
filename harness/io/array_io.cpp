#include "harness/io/array_io.h"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/sha256.h"

namespace ufp4 {

int64_t ArrayF32::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---- .npy ----------------------------------------------------------------------------------

namespace {

std::string header_value(const std::string& header, const std::string& key, const std::string& path) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) throw Error(path + ": npy header has no '" + key + "'");
  size_t colon = header.find(':', k);
  return header.substr(colon + 1);
}

float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) bits = sign;
    else {
      int e = -1;
      do { ++e; mant <<= 1; } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 112) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

ArrayF32 read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error(path + ": cannot open for reading");
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  char magic[8];
  in.read(magic, 8);
  if (!in || std::memcmp(magic, "\x93NUMPY", 6) != 0) throw Error(path + ": not a .npy file (bad magic)");
  if (magic[6] < 1 || magic[6] > 3) throw Error(path + ": npy format version " + std::to_string(magic[6]) + " is not supported (allowed: 1, 2, 3)");
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    uint16_t h16 = 0;
    in.read(reinterpret_cast<char*>(&h16), 2);
    hlen = h16;
  } else {
    in.read(reinterpret_cast<char*>(&hlen), 4);
  }
  if (!in || hlen > file_size) throw Error(path + ": truncated npy header");
  std::string header(hlen, ' ');
  in.read(&header[0], hlen);
  if (!in) throw Error(path + ": truncated npy header");
  std::string descr = header_value(header, "descr", path);
  const size_t q1 = descr.find('\''), q2 = q1 == std::string::npos ? q1 : descr.find('\'', q1 + 1);
  if (q2 == std::string::npos) throw Error(path + ": npy header: 'descr' is not a quoted dtype");
  descr = descr.substr(q1 + 1, q2 - q1 - 1);
  const std::string fortran = header_value(header, "fortran_order", path);
  const size_t t = fortran.find_first_not_of(" "), f = fortran.find("False");
  if (t == std::string::npos || (fortran.compare(t, 4, "True") != 0 && f != t))
    throw Error(path + ": npy header: 'fortran_order' is neither True nor False");
  if (fortran.compare(t, 4, "True") == 0) throw Error(path + ": fortran_order arrays are not supported (save with np.ascontiguousarray)");
  std::string shp = header_value(header, "shape", path);
  const size_t open = shp.find('('), close = shp.find(')');
  if (open == std::string::npos || close == std::string::npos || close < open) throw Error(path + ": npy header: 'shape' is not a tuple");
  shp = shp.substr(open + 1, close - open - 1);
  ArrayF32 a;
  std::stringstream ss(shp);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    const size_t s0 = tok.find_first_not_of(" "), s1 = tok.find_last_not_of(" ");
    if (s0 == std::string::npos) continue;
    tok = tok.substr(s0, s1 - s0 + 1);
    if (tok.empty() || tok.size() > 18 || tok.find_first_not_of("0123456789") != std::string::npos)
      throw Error(path + ": npy header: shape entry '" + tok + "' is not a non-negative integer");
    a.shape.push_back(std::stoll(tok));
  }
  const std::map<std::string, uint64_t> widths = {{"<f4", 4}, {"<f8", 8}, {"<f2", 2}};
  if (!widths.count(descr)) throw Error(path + ": npy dtype '" + descr + "' is not supported (allowed: <f4, <f8, <f2)");
  // The data must be in the file, and nothing after it, before anything is allocated for it.
  std::string shape_text;
  for (int64_t d : a.shape) shape_text += (shape_text.empty() ? "" : ", ") + std::to_string(d);
  uint64_t n = 1;
  bool empty = false;
  for (int64_t d : a.shape) empty = empty || d == 0;
  for (int64_t d : a.shape) {
    if (!empty && n > (uint64_t(1) << 62) / static_cast<uint64_t>(d))
      throw Error(path + ": npy shape (" + shape_text + ") holds more values than any array can (its product overflows; allowed: up to 2^62 values)");
    n *= empty ? 0 : static_cast<uint64_t>(d);
  }
  const uint64_t data_start = static_cast<uint64_t>(in.tellg()), bytes = n * widths.at(descr);
  if (data_start + bytes > file_size)
    throw Error(path + ": truncated npy data (the shape (" + shape_text + ") needs " + std::to_string(bytes) + " bytes of " + descr + ", the file holds " +
                std::to_string(file_size - data_start) + ")");
  if (data_start + bytes < file_size)
    throw Error(path + ": " + std::to_string(file_size - data_start - bytes) + " bytes after the " + std::to_string(n) + " values its shape (" + shape_text +
                ") declares: the header does not describe the data");
  a.data.resize(static_cast<size_t>(n));
  if (descr == "<f4") {
    in.read(reinterpret_cast<char*>(a.data.data()), static_cast<std::streamsize>(n * 4));
  } else if (descr == "<f8") {
    std::vector<double> v(static_cast<size_t>(n));
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 8));
    for (uint64_t i = 0; i < n; ++i) {
      a.data[i] = static_cast<float>(v[i]);
      if (std::isinf(a.data[i]) && !std::isinf(v[i]))
        throw Error(path + ": value " + std::to_string(v[i]) + " at index " + std::to_string(i) +
                    " is beyond float32's range, where the quantizers work (allowed: |x| up to 3.4028235e38)");
    }
  } else {
    std::vector<uint16_t> v(static_cast<size_t>(n));
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 2));
    for (uint64_t i = 0; i < n; ++i) a.data[i] = half_to_float(v[i]);
  }
  if (!in) throw Error(path + ": truncated npy data (expected " + std::to_string(n) + " values)");
  return a;
}

void write_npy(const std::string& path, const ArrayF32& a) {
  std::string shape = "(";
  for (size_t i = 0; i < a.shape.size(); ++i) shape += std::to_string(a.shape[i]) + (a.shape.size() == 1 ? "," : (i + 1 < a.shape.size() ? ", " : ""));
  shape += ")";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  AtomicFile out(path);
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t hl = static_cast<uint16_t>(header.size());
  out.write(&hl, 2);
  out.write(header.data(), header.size());
  out.write(a.data.data(), a.data.size() * 4);
  out.commit();
}

// ---- HDF5 ----------------------------------------------------------------------------------

namespace {

struct H5Silence {  // library errors become our exceptions, not stderr dumps
  H5Silence() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};
const H5Silence g_h5_silence;

void h5check(int64_t rc, const std::string& what) {
  if (rc < 0) throw RuntimeError("HDF5: " + what + " failed");
}

std::vector<hsize_t> dims_of(const std::vector<int64_t>& shape) {
  std::vector<hsize_t> d;
  for (int64_t s : shape) d.push_back(static_cast<hsize_t>(s));
  return d;
}

// HDF5 stamps every object header of the 1.8 format with the time it was made unless told not to; without the
// stamps a file's bytes follow from its content alone, so the same values written twice give the same file.
void create_parent_groups(int64_t file, const std::string& name) {
  hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
  if (H5Pset_obj_track_times(gcpl, 0) < 0) { H5Pclose(gcpl); throw RuntimeError("HDF5: cannot make groups without time stamps"); }
  for (size_t slash = name.find('/', 1); slash != std::string::npos; slash = name.find('/', slash + 1)) {
    const std::string group = name.substr(0, slash);
    if (H5Lexists(file, group.c_str(), H5P_DEFAULT) > 0) continue;
    hid_t g = H5Gcreate2(file, group.c_str(), H5P_DEFAULT, gcpl, H5P_DEFAULT);
    if (g < 0) { H5Pclose(gcpl); throw RuntimeError("HDF5: cannot create group '" + group + "'"); }
    H5Gclose(g);
  }
  H5Pclose(gcpl);
}

void write_ds(int64_t file, const std::string& name, hid_t type, const void* data, const std::vector<int64_t>& shape) {
  create_parent_groups(file, name);
  std::vector<hsize_t> d = dims_of(shape);
  hid_t space = H5Screate_simple(static_cast<int>(d.size()), d.data(), nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (H5Pset_obj_track_times(dcpl, 0) < 0) { H5Pclose(dcpl); H5Sclose(space); throw RuntimeError("HDF5: cannot make datasets without time stamps"); }
  hsize_t numel = 1;
  for (hsize_t x : d) numel *= x;
  if (numel > 4096 && !d.empty()) {  // chunk + deflate large arrays
    std::vector<hsize_t> chunk = d;
    hsize_t c = 1;
    for (size_t i = chunk.size(); i-- > 0;) { chunk[i] = std::min<hsize_t>(chunk[i], std::max<hsize_t>(1, 65536 / c)); c *= chunk[i]; }
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    H5Pset_deflate(dcpl, 4);
  }
  hid_t ds = H5Dcreate2(file, name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Pclose(dcpl);
  if (ds < 0) { H5Sclose(space); throw RuntimeError("HDF5: cannot create dataset '" + name + "'"); }
  herr_t rc = H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  H5Dclose(ds);
  H5Sclose(space);
  h5check(rc, "writing dataset '" + name + "'");
}

// An HDF5 id closed when it goes out of scope, an exception's way included.
struct H5Id {
  hid_t id;
  herr_t (*close)(hid_t);
  ~H5Id() {
    if (id >= 0) close(id);
  }
};

template <class F>
void with_object(int64_t file, const std::string& object, F f) {
  const H5Id obj{H5Oopen(file, object.c_str(), H5P_DEFAULT), H5Oclose};
  if (obj.id < 0) throw RuntimeError("HDF5: no object '" + object + "'");
  f(obj.id);
}

void put_attr(hid_t obj, const std::string& key, hid_t type, const void* value) {
  if (H5Aexists(obj, key.c_str()) > 0) H5Adelete(obj, key.c_str());
  const H5Id space{H5Screate(H5S_SCALAR), H5Sclose};
  const H5Id a{H5Acreate2(obj, key.c_str(), type, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  h5check(a.id < 0 ? -1 : H5Awrite(a.id, type, value), "writing attribute '" + key + "'");
}

}  // namespace

// The bytes of a file the core driver holds, taken as the file closes (HDF5's file image callbacks): `size`, the
// file's end, is read just before the close. A 1.8-format file still open for writing gives H5Fget_file_image a
// superblock whose checksum the close has yet to write (HDF5 1.10.8 reads that image back as damaged).
struct H5FileImage {
  size_t size = 0;
  std::string bytes;
};

namespace {

void* image_malloc(size_t n, H5FD_file_image_op_t, void*) { return std::malloc(n); }
void* image_memcpy(void* to, const void* from, size_t n, H5FD_file_image_op_t, void*) { return std::memcpy(to, from, n); }
void* image_realloc(void* p, size_t n, H5FD_file_image_op_t, void*) { return std::realloc(p, n); }
// A C callback: nothing may throw out of it (a failed copy leaves the image empty, which commit() reports).
herr_t image_free(void* p, H5FD_file_image_op_t op, void* udata) noexcept {
  auto* image = static_cast<H5FileImage*>(udata);
  try {
    if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && p && image->size > 0) image->bytes.assign(static_cast<const char*>(p), image->size);
  } catch (...) {
    image->bytes.clear();
  }
  std::free(p);
  return 0;
}
void* image_udata_copy(void* udata) { return udata; }  // one image a writer: the property list's copies share it
herr_t image_udata_free(void*) { return 0; }

}  // namespace

// The file is built in memory (HDF5's core driver, no backing store) and written by commit() through
// AtomicFile, so HDF5 never writes a half file and a failure is reported with its cause.
H5Writer::H5Writer(const std::string& path) : path_(path), image_(std::make_unique<H5FileImage>()) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_core(fapl, 1 << 20, /*backing_store=*/0);
  H5FD_file_image_callbacks_t callbacks = {image_malloc, image_memcpy, image_realloc, image_free, image_udata_copy, image_udata_free, image_.get()};
  // The 1.8 file format: its object headers keep attributes of any size (the original format stops at 64 KiB, which
  // the row labels of a MoE capture step pass). Every HDF5 library since 1.8 reads it; the content hash is of values,
  // not of the format, so a file's content_sha256 is the same in either. A strong close closes any object left open,
  // so the driver's buffer (and the image's callbacks) never outlive this writer.
  const bool set = H5Pset_file_image_callbacks(fapl, &callbacks) >= 0 && H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18) >= 0 &&
                   H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) >= 0;
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);  // the root group's header: no time stamp either
  const bool untimed = H5Pset_obj_track_times(fcpl, 0) >= 0;
  file_ = set && untimed ? H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl) : -1;
  H5Pclose(fcpl);
  H5Pclose(fapl);
  if (file_ < 0) throw RuntimeError(path + ": cannot create an HDF5 file in memory");
}

H5Writer::~H5Writer() {
  if (file_ >= 0) H5Fclose(file_);
}

void H5Writer::write_f32(const std::string& n, const float* d, const std::vector<int64_t>& s) { write_ds(file_, n, H5T_NATIVE_FLOAT, d, s); }
void H5Writer::write_f64(const std::string& n, const double* d, const std::vector<int64_t>& s) { write_ds(file_, n, H5T_NATIVE_DOUBLE, d, s); }
void H5Writer::write_u8(const std::string& n, const uint8_t* d, const std::vector<int64_t>& s) { write_ds(file_, n, H5T_NATIVE_UINT8, d, s); }
void H5Writer::write_i64(const std::string& n, const int64_t* d, const std::vector<int64_t>& s) { write_ds(file_, n, H5T_NATIVE_INT64, d, s); }

void H5Writer::attr(const std::string& key, const std::string& value, const std::string& object) {
  with_object(file_, object, [&](hid_t obj) {
    const H5Id t{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(t.id, value.empty() ? 1 : value.size());
    H5Tset_cset(t.id, H5T_CSET_UTF8);
    put_attr(obj, key, t.id, value.empty() ? "" : value.data());
  });
}
void H5Writer::attr(const std::string& key, double value, const std::string& object) {
  with_object(file_, object, [&](hid_t obj) { put_attr(obj, key, H5T_NATIVE_DOUBLE, &value); });
}
void H5Writer::attr(const std::string& key, int64_t value, const std::string& object) {
  with_object(file_, object, [&](hid_t obj) { put_attr(obj, key, H5T_NATIVE_INT64, &value); });
}

namespace {
// Files written before `content_scope` existed were hashed by asking the file id, not its root group, for the
// root's attributes: HDF5 1.10 answers no attributes, 1.12 and later (through its VOL layer) the root's. They
// are checked as they were written: the earlier way, then, if that differs, with the root's attributes.
constexpr const char* kContentScopeAttr = "content_scope";
constexpr const char* kContentScopeAll = "every dataset and attribute";
std::string content_sha256_of(hid_t file, bool root_attributes);
}  // namespace

void H5Writer::commit() {
  if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0) throw RuntimeError(path_ + ": HDF5 flush failed");
  attr(kContentScopeAttr, std::string(kContentScopeAll));  // the hash below covers the root's attributes too
  attr("content_sha256", content_sha256_of(file_, /*root_attributes=*/true));
  if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0) throw RuntimeError(path_ + ": HDF5 flush failed");
  const ssize_t size = H5Fget_file_image(file_, nullptr, 0);
  if (size <= 0) throw RuntimeError(path_ + ": HDF5 file image unavailable");
  image_->size = static_cast<size_t>(size);
  const herr_t closed = H5Fclose(file_);
  file_ = -1;
  if (closed < 0 || image_->bytes.size() != image_->size) throw RuntimeError(path_ + ": HDF5 file image unavailable at its close");
  write_file_atomically(path_, image_->bytes);
  committed_ = true;
}

namespace {

struct H5Reading {
  hid_t file = -1, ds = -1, space = -1;
  H5Reading(const std::string& path, const std::string& dataset) {
    file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) throw Error(path + ": cannot open as HDF5");
    ds = H5Dopen2(file, dataset.c_str(), H5P_DEFAULT);
    if (ds < 0) throw Error(path + ": no dataset '" + dataset + "'");
    space = H5Dget_space(ds);
  }
  ~H5Reading() {
    if (space >= 0) H5Sclose(space);
    if (ds >= 0) H5Dclose(ds);
    if (file >= 0) H5Fclose(file);
  }
  std::vector<int64_t> shape() const {
    int nd = H5Sget_simple_extent_ndims(space);
    std::vector<hsize_t> d(static_cast<size_t>(nd));
    H5Sget_simple_extent_dims(space, d.data(), nullptr);
    return std::vector<int64_t>(d.begin(), d.end());
  }
};

}  // namespace

ArrayF32 read_h5_f32(const std::string& path, const std::string& dataset) {
  H5Reading r(path, dataset);
  ArrayF32 a;
  a.shape = r.shape();
  a.data.resize(static_cast<size_t>(a.numel()));
  h5check(H5Dread(r.ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, a.data.data()), path + ": reading '" + dataset + "'");
  return a;
}

std::vector<double> read_h5_f64(const std::string& path, const std::string& dataset) {
  H5Reading r(path, dataset);
  int64_t n = 1;
  for (int64_t d : r.shape()) n *= d;
  std::vector<double> out(static_cast<size_t>(n));
  h5check(H5Dread(r.ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), path + ": reading '" + dataset + "'");
  return out;
}

std::vector<uint8_t> read_h5_u8(const std::string& path, const std::string& dataset, std::vector<int64_t>* shape) {
  H5Reading r(path, dataset);
  std::vector<int64_t> s = r.shape();
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  std::vector<uint8_t> out(static_cast<size_t>(n));
  h5check(H5Dread(r.ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), path + ": reading '" + dataset + "'");
  if (shape) *shape = s;
  return out;
}

namespace {
// Calls fn(attribute, its type, its name) for every attribute of `object`, in name order.
template <class Fn>
void for_each_attr(const std::string& path, const std::string& object, Fn fn) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) throw Error(path + ": cannot open as HDF5");
  hid_t obj = H5Oopen(file, object.c_str(), H5P_DEFAULT);
  if (obj < 0) { H5Fclose(file); throw Error(path + ": no object '" + object + "'"); }
  int n = H5Aget_num_attrs(obj);
  for (int i = 0; i < n; ++i) {
    hid_t a = H5Aopen_by_idx(obj, ".", H5_INDEX_NAME, H5_ITER_INC, static_cast<hsize_t>(i), H5P_DEFAULT, H5P_DEFAULT);
    char name[256];
    H5Aget_name(a, sizeof name, name);
    hid_t t = H5Aget_type(a);
    fn(a, t, name);
    H5Tclose(t);
    H5Aclose(a);
  }
  H5Oclose(obj);
  H5Fclose(file);
}
}  // namespace

std::map<std::string, std::string> read_h5_string_attrs(const std::string& path, const std::string& object) {
  std::map<std::string, std::string> out;
  for_each_attr(path, object, [&](hid_t a, hid_t t, const char* name) {
    if (H5Tget_class(t) != H5T_STRING || H5Tis_variable_str(t)) return;
    std::string v(H5Tget_size(t), '\0');
    H5Aread(a, t, &v[0]);
    while (!v.empty() && v.back() == '\0') v.pop_back();
    out[name] = v;
  });
  return out;
}

std::map<std::string, double> read_h5_numeric_attrs(const std::string& path, const std::string& object) {
  std::map<std::string, double> out;
  for_each_attr(path, object, [&](hid_t a, hid_t t, const char* name) {
    const H5T_class_t c = H5Tget_class(t);
    if (c != H5T_INTEGER && c != H5T_FLOAT) return;
    hid_t space = H5Aget_space(a);
    double v = 0;
    if (H5Sget_simple_extent_npoints(space) == 1 && H5Aread(a, H5T_NATIVE_DOUBLE, &v) >= 0) out[name] = v;
    H5Sclose(space);
  });
  return out;
}

namespace {
#if H5_VERSION_GE(1, 12, 0)
using ObjectInfo = H5O_info2_t;
#else
using ObjectInfo = H5O_info_t;
#endif
herr_t collect_dataset(hid_t, const char* name, const ObjectInfo* info, void* out) {
  if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> list_h5_datasets(const std::string& path) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) throw Error(path + ": cannot open as HDF5");
  std::vector<std::string> out;
#if H5_VERSION_GE(1, 12, 0)
  herr_t rc = H5Ovisit(file, H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &out, H5O_INFO_BASIC);
#else
  herr_t rc = H5Ovisit(file, H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &out);
#endif
  H5Fclose(file);
  if (rc < 0) throw Error(path + ": cannot list datasets");
  return out;
}

double read_h5_double_attr(const std::string& path, const std::string& key, const std::string& object) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) throw Error(path + ": cannot open as HDF5");
  double v = 0;
  hid_t a = H5Aopen_by_name(file, object.c_str(), key.c_str(), H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = a < 0 ? -1 : H5Aread(a, H5T_NATIVE_DOUBLE, &v);
  if (a >= 0) H5Aclose(a);
  H5Fclose(file);
  if (rc < 0) throw Error(path + ": no numeric attribute '" + key + "' on " + object);
  return v;
}

// ---- content hash ----------------------------------------------------------------------------

namespace {

constexpr const char* kContentAttr = "content_sha256";


// Hashes one length-prefixed piece, so that no two different contents share a byte stream.
void put(Sha256& h, const void* data, size_t n) {
  const uint64_t len = n;
  h.update(&len, sizeof len);
  h.update(data, n);
}
void put(Sha256& h, const std::string& s) { put(h, s.data(), s.size()); }

// A value as its type's class, size and the bytes HDF5 converts it to in this machine's native form.
std::string native_bytes(hid_t obj, hid_t type, hid_t space, bool attribute, std::string& tag) {
  const H5T_class_t c = H5Tget_class(type);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n < 0) throw RuntimeError("HDF5: cannot size a value");
  std::string out;
  if (c == H5T_STRING && !H5Tis_variable_str(type)) {
    const size_t w = H5Tget_size(type);
    out.assign(std::max<size_t>(1, w * static_cast<size_t>(n)), '\0');
    h5check(attribute ? H5Aread(obj, type, &out[0]) : H5Dread(obj, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &out[0]), "reading a string");
    while (!out.empty() && out.back() == '\0') out.pop_back();
    tag = "string";
    return out;
  }
  if (c != H5T_INTEGER && c != H5T_FLOAT) throw RuntimeError("HDF5: a value of a type the content hash does not cover");
  const H5Id native{H5Tget_native_type(type, H5T_DIR_ASCEND), H5Tclose};
  const size_t w = H5Tget_size(native.id);
  out.assign(std::max<size_t>(1, w * static_cast<size_t>(n)), '\0');  // HDF5 wants a buffer even for no values
  const herr_t rc = attribute ? H5Aread(obj, native.id, &out[0]) : H5Dread(obj, native.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, &out[0]);
  out.resize(w * static_cast<size_t>(n));
  tag = std::string(c == H5T_FLOAT ? "float" : (H5Tget_sign(native.id) == H5T_SGN_NONE ? "uint" : "int")) + std::to_string(8 * w);
  h5check(rc, "reading a value");
  return out;
}

std::string shape_text(hid_t space) {
  const int nd = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> d(static_cast<size_t>(std::max(nd, 0)));
  if (nd > 0) H5Sget_simple_extent_dims(space, d.data(), nullptr);
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

void hash_attributes(Sha256& h, hid_t obj, bool root) {
  const int n = H5Aget_num_attrs(obj);
  if (n < 0) throw RuntimeError("HDF5: cannot count an object's attributes");
  for (int i = 0; i < n; ++i) {
    const H5Id a{H5Aopen_by_idx(obj, ".", H5_INDEX_NAME, H5_ITER_INC, static_cast<hsize_t>(i), H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
    if (a.id < 0) throw RuntimeError("HDF5: cannot open an attribute");
    char name[256] = {0};
    H5Aget_name(a.id, sizeof name, name);
    if (root && std::string(name) == kContentAttr) continue;
    const H5Id t{H5Aget_type(a.id), H5Tclose}, space{H5Aget_space(a.id), H5Sclose};
    std::string tag;
    const std::string bytes = native_bytes(a.id, t.id, space.id, /*attribute=*/true, tag);
    put(h, std::string("attribute ") + name + " " + tag + " " + shape_text(space.id));
    put(h, bytes);
  }
}

struct ObjectNames {
  std::vector<std::pair<std::string, H5O_type_t>> items;
};
herr_t collect_object(hid_t, const char* name, const ObjectInfo* info, void* out) {
  static_cast<ObjectNames*>(out)->items.emplace_back(name, info->type);
  return 0;
}

// Whether the file says its hash covers the root's attributes; a value this build does not know is refused.
bool scoped(hid_t file) {
  const htri_t has = H5Aexists_by_name(file, "/", kContentScopeAttr, H5P_DEFAULT);
  if (has < 0) throw RuntimeError("HDF5: cannot look for the attribute content_scope");
  if (has == 0) return false;
  const H5Id a{H5Aopen_by_name(file, "/", kContentScopeAttr, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  if (a.id < 0) throw RuntimeError("HDF5: cannot open the attribute content_scope");
  const H5Id t{H5Aget_type(a.id), H5Tclose}, space{H5Aget_space(a.id), H5Sclose};
  std::string tag;
  const std::string scope = native_bytes(a.id, t.id, space.id, /*attribute=*/true, tag);
  if (scope != kContentScopeAll)
    throw RuntimeError("content_scope '" + scope + "' is not one this ufp4 knows (allowed: " + kContentScopeAll + "): a file of a later ufp4?");
  return true;
}

std::string content_sha256_of(hid_t file, bool root_attributes) {
  Sha256 h;
  put(h, std::string("ufp4 HDF5 content 1"));
  if (root_attributes) {
    const H5Id root{H5Oopen(file, "/", H5P_DEFAULT), H5Oclose};
    if (root.id < 0) throw RuntimeError("HDF5: cannot open the root group");
    hash_attributes(h, root.id, /*root=*/true);
  }
  ObjectNames names;
#if H5_VERSION_GE(1, 12, 0)
  h5check(H5Ovisit(file, H5_INDEX_NAME, H5_ITER_INC, collect_object, &names, H5O_INFO_BASIC), "listing objects");
#else
  h5check(H5Ovisit(file, H5_INDEX_NAME, H5_ITER_INC, collect_object, &names), "listing objects");
#endif
  for (const auto& [name, type] : names.items) {
    if (name == ".") continue;
    const H5Id obj{H5Oopen(file, name.c_str(), H5P_DEFAULT), H5Oclose};
    if (obj.id < 0) throw RuntimeError("HDF5: cannot open '" + name + "'");
    if (type == H5O_TYPE_DATASET) {
      const H5Id t{H5Dget_type(obj.id), H5Tclose}, space{H5Dget_space(obj.id), H5Sclose};
      std::string tag;
      const std::string bytes = native_bytes(obj.id, t.id, space.id, /*attribute=*/false, tag);
      put(h, "dataset " + name + " " + tag + " " + shape_text(space.id));
      put(h, bytes);
    } else {
      put(h, "group " + name);
    }
    hash_attributes(h, obj.id, /*root=*/false);
  }
  return h.hex();
}

}  // namespace

namespace {

// `root_attributes`: nullopt, as the file's content_scope says; else with or without the root's attributes.
std::string content_sha256_at(const std::string& path, std::optional<bool> root_attributes) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) throw Error(path + ": cannot open as HDF5");
  try {
    const std::string hex = content_sha256_of(file, root_attributes ? *root_attributes : scoped(file));
    H5Fclose(file);
    return hex;
  } catch (const std::exception& e) {
    H5Fclose(file);
    throw Error(path + ": unreadable content (" + std::string(e.what()) + ")");
  }
}

}  // namespace

std::string h5_content_sha256(const std::string& path) { return content_sha256_at(path, std::nullopt); }

bool verify_h5_content(const std::string& path) {
  const auto attrs = read_h5_string_attrs(path);
  const auto it = attrs.find(kContentAttr);
  if (it == attrs.end()) return false;
  std::string now = h5_content_sha256(path);
  // Without content_scope, a file that HDF5 1.12 or later hashed with the root's attributes (above).
  if (now != it->second && !attrs.count(kContentScopeAttr) && content_sha256_at(path, true) == it->second) now = it->second;
  if (now != it->second)
    throw Error(path + ": content does not match the content_sha256 it was written with (" + it->second.substr(0, 16) + ", now " + now.substr(0, 16) +
                "): the file is damaged or was edited; remove it (a run trains it again)");
  return true;
}

}  // namespace ufp4
