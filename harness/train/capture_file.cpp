#include "harness/train/capture_file.h"

#include "common/fs.h"
#include "harness/io/array_io.h"
#include "harness/io/provenance.h"

namespace ufp4 {

std::string write_capture(const std::string& dir, int64_t step, const OperandCapture::Operands& operands,
                          const std::map<std::string, torch::Tensor>& raw) {
  if (operands.empty()) return "";
  make_dirs(dir);
  const std::string path = dir + "/capture_step" + std::to_string(step) + ".h5";
  H5Writer w(path);
  for (const auto& kv : operands) {
    for (int i = 0; i < 2; ++i) {
      const torch::Tensor& t = i == 0 ? kv.second.first : kv.second.second;
      if (!t.defined()) continue;
      w.write_f32(kv.first + (i == 0 ? "/before" : "/after"), t.data_ptr<float>(), std::vector<int64_t>(t.sizes().begin(), t.sizes().end()));
    }
  }
  for (const auto& [key, t] : raw) {
    const torch::Tensor c = t.cpu().contiguous();
    w.write_f32(key + "/raw", c.data_ptr<float>(), std::vector<int64_t>(c.sizes().begin(), c.sizes().end()));
  }
  w.attr("step", static_cast<int64_t>(step));
  w.attr("layout", std::string("each operand in the layout its GEMM consumes: 'before' is the (rotated) unquantized operand, 'raw' the same before its rotation"));
  write_provenance(w);
  w.commit();
  return path;
}

}  // namespace ufp4
