// ufp4: the command-line front door. Exit codes: 0 ok, 1 runtime failure, 2 bad usage or input.
#include <string>
#include <vector>

#include "common/stack_dump.h"
#include "harness/cli/cli.h"
#include "harness/train/determinism.h"

int main(int argc, char** argv) {
  ufp4::install_stack_dump_handler();        // the run scheduler asks a stalled run where it waits
  ufp4::ensure_cublas_workspace_config();  // before any CUDA call: cuBLAS reads it at its first handle
  return ufp4::cli_main(std::vector<std::string>(argv + 1, argv + argc));
}
