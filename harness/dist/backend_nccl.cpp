// NCCL: one GPU a rank, collectives on NCCL's streams ordered after the caller's stream.
#include "common/error.h"
#include "harness/dist/backends.h"
#ifdef UFP4_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "harness/dist/c10d_communicator.h"
#endif

namespace ufp4 {

std::shared_ptr<Communicator> make_nccl_group(const GroupSpec& g) {
#ifdef UFP4_WITH_NCCL
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = g.timeout;
  auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(g.store, g.rank, g.size, opts);
  return std::make_shared<C10dCommunicator<c10d::ProcessGroupNCCL>>(group, g.rank, g.size, "nccl", /*flat_collectives=*/true, /*cuda=*/true);
#else
  (void)g;
  throw Error("--backend nccl: this build has no NCCL (a CUDA build against a LibTorch with NCCL and nccl.h found); allowed here: gloo");
#endif
}

}  // namespace ufp4
