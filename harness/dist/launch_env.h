// Who this process is in a run of several processes, read from its launcher's environment:
//  - torchrun (and `ufp4 run --nproc-per-node N`, which sets the same names): RANK, WORLD_SIZE,
//    LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; with TORCHELASTIC_USE_AGENT_STORE the
//    agent hosts the TCP store and every rank connects as a client;
//  - Slurm's srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE and the first host
//    of SLURM_JOB_NODELIST (MASTER_ADDR and MASTER_PORT win when set).
// No LibTorch here: the launcher and the tests use it as plain data.
#pragma once
#include <functional>
#include <optional>
#include <string>

namespace ufp4 {

struct LaunchEnv {
  std::string launcher = "none";  // torchrun | slurm | none (one process)
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;  // the TCP store is hosted by torchrun's agent: rank 0 is a client too
  int restart = 0;           // TORCHELASTIC_RESTART_COUNT: store keys of a restarted group do not collide
  bool distributed() const { return launcher != "none"; }
  std::string describe() const;  // "rank 1 of 2 (local 1), torchrun, store 127.0.0.1:29500"
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
// Throws ufp4::Error (exit 2) naming the variable when a value is malformed or out of range.
LaunchEnv read_launch_env(const EnvLookup& env);
LaunchEnv read_launch_env();  // this process's environment

// The first host of a Slurm node list: "gpu[003-005,9],cpu1" -> "gpu003", "a,b" -> "a".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace ufp4
