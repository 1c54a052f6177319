#include "harness/io/provenance.h"

#include <torch/torch.h>
#include <unistd.h>

#include <ctime>

#include "harness/io/array_io.h"
#include "harness/io/version_info.h"
#ifdef UFP4_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>
#endif

namespace ufp4 {

const char* version() { return UFP4_VERSION_STRING; }
const char* git_commit() { return UFP4_GIT_COMMIT; }

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::map<std::string, std::string> provenance() {
  std::map<std::string, std::string> p;
  p["ufp4_version"] = version();
  p["git_commit"] = git_commit();
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  p["host"] = host;
  p["torch"] = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." + std::to_string(TORCH_VERSION_PATCH);
  p["device"] = "cpu";
  p["cuda"] = "none";
#ifdef UFP4_WITH_CUDA
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  p["cuda"] = "runtime " + std::to_string(rt) + ", driver " + std::to_string(drv);
  if (torch::cuda::is_available()) {
    p["device"] = at::cuda::getCurrentDeviceProperties()->name;
    p["device_count"] = std::to_string(torch::cuda::device_count());
  }
#endif
  p["utc"] = utc_now();
  return p;
}

void write_provenance(H5Writer& w) {
  for (const auto& kv : provenance()) w.attr(kv.first, kv.second);
}

}  // namespace ufp4
