// Gloo: CPU tensors, and CUDA tensors through host copies (two ranks on one GPU, tests).
#include <cstdlib>

#include "common/error.h"
#include "harness/dist/backends.h"
#ifdef UFP4_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "harness/dist/c10d_communicator.h"
#endif

namespace ufp4 {

std::shared_ptr<Communicator> make_gloo_group(const GroupSpec& g) {
#ifdef UFP4_WITH_GLOO
  auto opts = c10d::ProcessGroupGloo::Options::create(g.timeout);
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  else if (g.host == "127.0.0.1" || g.host == "localhost")
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  opts->threads = 2;
  auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(g.store, g.rank, g.size, opts);
  return std::make_shared<C10dCommunicator<c10d::ProcessGroupGloo>>(group, g.rank, g.size, "gloo", /*flat_collectives=*/false, g.cuda);
#else
  (void)g;
  throw Error("--backend gloo: this build has no Gloo (install the Debian/Ubuntu package libgloo-dev and rebuild)");
#endif
}

}  // namespace ufp4
