// The process groups of a run of several processes, on c10d: a TCPStore for the rendezvous (rank 0
// hosts it, or torchrun's agent does), then the groups the engine's parallelism needs. Today every
// rank holds a whole model replica: `data` is the world. Expert parallelism adds an `expert` group
// (the ranks that split one replica's experts, all-to-all dispatch) and makes `data` the ranks that
// hold the same experts; both are made by new_group over the same store, so nothing here reshapes.
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/dist/communicator.h"
#include "harness/dist/launch_env.h"

namespace ufp4 {

struct DistOptions {
  std::string backend = "auto";           // auto (nccl on CUDA, gloo on CPU) | nccl | gloo
  std::chrono::seconds timeout{900};      // a collective waiting longer fails every rank
};

// Expert parallelism over `ep` ranks: each block of ep consecutive ranks splits one replica's experts
// (`experts`: their tokens' all-to-all), and the ranks at the same place in every block hold the same
// experts (`experts_data`: their gradients' sum).
struct ExpertGroups {
  std::shared_ptr<Communicator> experts, experts_data;
};

class ProcessGroups {
 public:
  // Connects to the other ranks of `env` (blocks until all have come, up to the timeout). `cuda`:
  // the engine's tensors live on this rank's GPU.
  ProcessGroups(const LaunchEnv& env, const DistOptions& o, bool cuda);
  // A group of the given world ranks, named uniquely across the run; nullptr on a rank outside it.
  // Every rank must call it, in the same order (the store's keys are per name).
  std::shared_ptr<Communicator> new_group(const std::string& name, const std::vector<int>& ranks);
  // This rank's expert groups for `ep` ranks an expert group (made on the first call for that size,
  // which every rank makes, in the same order); an Error when ep does not divide the ranks.
  ExpertGroups expert_groups(int ep);
  const LaunchEnv& env() const { return env_; }
  const std::string& backend() const { return backend_; }
  std::shared_ptr<Communicator> world, data;

 private:
  LaunchEnv env_;
  std::string backend_;
  DistOptions opts_;
  bool cuda_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::map<int, ExpertGroups> expert_groups_;
};

// The backends this build can make: "gloo" and/or "nccl".
std::vector<std::string> available_backends();

}  // namespace ufp4
