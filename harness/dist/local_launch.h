// `ufp4 run --nproc-per-node N`: the ranks of one run on this machine, for users without torchrun
// (and CI, on the CPU). Starts N copies of a command with the environment torchrun would give them
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT),
// passes SIGINT/SIGTERM on to them (they agree on a step, checkpoint and exit 130), and when one
// fails stops the others: SIGTERM, then SIGKILL after `grace`. No LibTorch here.
#pragma once
#include <chrono>
#include <string>
#include <vector>

namespace ufp4 {

// argv: the command each rank runs (argv[0] an executable path). Returns 0 when every rank finished,
// 130 when every rank stopped on a signal (checkpointed), 1 after a failure, with one line naming the
// first rank that failed and how.
int launch_local_ranks(int nproc, const std::vector<std::string>& argv, std::chrono::seconds grace);

// A TCP port on 127.0.0.1 that nothing listens on now.
int free_local_port();

}  // namespace ufp4
