#include "harness/dist/process_groups.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <csignal>

#include "common/error.h"
#include "harness/dist/backends.h"
#include "harness/dist/store_listener.h"

namespace ufp4 {

std::vector<std::string> available_backends() {
  std::vector<std::string> b;
#ifdef UFP4_WITH_GLOO
  b.push_back("gloo");
#endif
#ifdef UFP4_WITH_NCCL
  b.push_back("nccl");
#endif
  return b;
}

ProcessGroups::ProcessGroups(const LaunchEnv& env, const DistOptions& o, bool cuda) : env_(env), opts_(o), cuda_(cuda) {
  // A peer that died leaves a closed socket: a write to it must fail the collective, which names this rank
  // and the group, not kill this process with SIGPIPE before it can say why (exit 141, no message).
  std::signal(SIGPIPE, SIG_IGN);
  const std::vector<std::string> have = available_backends();
  std::string joined;
  for (const auto& b : have) joined += (joined.empty() ? "" : ", ") + b;
  backend_ = o.backend == "auto" ? (cuda ? "nccl" : "gloo") : o.backend;
  if (backend_ != "nccl" && backend_ != "gloo") throw Error("--backend " + o.backend + ": unknown (allowed: auto, nccl, gloo)");
  if (backend_ == "nccl" && !cuda) throw Error("--backend nccl needs CUDA tensors; this run is on the CPU (allowed: gloo)");
  if (std::find(have.begin(), have.end(), backend_) == have.end())
    throw Error("--backend " + backend_ + ": not in this build (built with: " + (joined.empty() ? "none" : joined) + ")");

  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(env.master_port);
  so.isServer = env.rank == 0 && !env.agent_store;
  if (!env.agent_store) so.numWorkers = static_cast<size_t>(env.world_size);
  so.waitWorkers = !env.agent_store;
  so.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(o.timeout);
  try {
    if (!so.isServer) wait_for_listener(env.master_addr, env.master_port, so.timeout);  // store_listener.h says why
    auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    // One key space per launch attempt: a restarted group never reads the keys of the one before.
    store_ = c10::make_intrusive<c10d::PrefixStore>("ufp4/attempt_" + std::to_string(env.restart), tcp);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    throw RuntimeError("rendezvous: " + env.describe() + ": could not reach the store (" + msg.substr(0, msg.find('\n')) + ")");
  }
  std::vector<int> all(static_cast<size_t>(env.world_size));
  for (int r = 0; r < env.world_size; ++r) all[static_cast<size_t>(r)] = r;
  world = new_group("world", all);
  data = world;
}

std::shared_ptr<Communicator> ProcessGroups::new_group(const std::string& name, const std::vector<int>& ranks) {
  const auto it = std::find(ranks.begin(), ranks.end(), env_.rank);
  if (it == ranks.end()) return nullptr;
  GroupSpec g;
  g.store = c10::make_intrusive<c10d::PrefixStore>("group/" + name, store_);
  g.rank = static_cast<int>(it - ranks.begin());
  g.size = static_cast<int>(ranks.size());
  g.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(opts_.timeout);
  g.host = env_.master_addr;
  g.cuda = cuda_;
  try {
    return backend_ == "nccl" ? make_nccl_group(g) : make_gloo_group(g);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    throw RuntimeError("process group " + name + " (" + backend_ + "): " + env_.describe() + ": " + msg.substr(0, msg.find('\n')));
  }
}

ExpertGroups ProcessGroups::expert_groups(int ep) {
  const auto it = expert_groups_.find(ep);
  if (it != expert_groups_.end()) return it->second;
  const int W = env_.world_size;
  if (ep < 1 || W % ep != 0)
    throw Error("expert parallelism over " + std::to_string(ep) + " ranks: it does not divide the " + std::to_string(W) + " ranks (allowed: a divisor of the ranks)");
  ExpertGroups g;
  const std::string size = std::to_string(ep);
  for (int block = 0; block < W / ep; ++block) {
    std::vector<int> ranks;
    for (int p = 0; p < ep; ++p) ranks.push_back(block * ep + p);
    if (auto c = new_group("experts" + size + "_" + std::to_string(block), ranks)) g.experts = c;
  }
  for (int p = 0; p < ep; ++p) {
    std::vector<int> ranks;
    for (int block = 0; block < W / ep; ++block) ranks.push_back(block * ep + p);
    if (auto c = new_group("experts_data" + size + "_" + std::to_string(p), ranks)) g.experts_data = c;
  }
  return expert_groups_[ep] = g;
}

}  // namespace ufp4
