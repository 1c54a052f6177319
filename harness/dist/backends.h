// Constructors of the c10d backends this build has (process_groups.cpp picks one). Each is in its
// own file, compiled only when its headers were found (UFP4_WITH_GLOO, UFP4_WITH_NCCL).
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "harness/dist/communicator.h"

namespace ufp4 {

struct GroupSpec {
  c10::intrusive_ptr<c10d::Store> store;  // already prefixed with the group's name
  int rank = 0, size = 1;
  std::chrono::milliseconds timeout{900000};
  std::string host;  // this rank's address for Gloo's sockets (GLOO_SOCKET_IFNAME wins)
  bool cuda = false;  // the tensors live on the current CUDA device
};

std::shared_ptr<Communicator> make_gloo_group(const GroupSpec& g);  // throws when built without Gloo
std::shared_ptr<Communicator> make_nccl_group(const GroupSpec& g);  // throws when built without NCCL

}  // namespace ufp4
