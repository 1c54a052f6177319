#include "harness/dist/launch_env.h"

#include <algorithm>
#include <cstdlib>

#include "common/error.h"

namespace ufp4 {

namespace {

int int_var(const EnvLookup& env, const std::string& name, int fallback, int min_value) {
  const std::optional<std::string> v = env(name);
  if (!v || v->empty()) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v->c_str(), &end, 10);
  if (*end != '\0' || x < min_value || x > 1 << 30)
    throw Error("environment: " + name + "=" + *v + ": not an integer >= " + std::to_string(min_value));
  return static_cast<int>(x);
}

}  // namespace

std::string LaunchEnv::describe() const {
  if (!distributed()) return "one process";
  return "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + " (local " + std::to_string(local_rank) + " of " +
         std::to_string(local_world_size) + "), " + launcher + ", store " + master_addr + ":" + std::to_string(master_port) +
         (agent_store ? " (agent)" : "");
}

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets; "prefix[range,...]" expands to prefix + the
  // range's first number, keeping its zero padding.
  size_t depth = 0, end = 0;
  for (; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    else if (nodelist[end] == ']' && depth) --depth;
    else if (nodelist[end] == ',' && depth == 0) break;
  }
  const std::string first = nodelist.substr(0, end);
  const size_t open = first.find('[');
  if (open == std::string::npos) return first;
  size_t stop = first.find_first_of("-,]", open + 1);
  if (stop == std::string::npos) throw Error("environment: SLURM_JOB_NODELIST=" + nodelist + ": unbalanced '['");
  const size_t close = first.find(']', open);
  return first.substr(0, open) + first.substr(open + 1, stop - open - 1) + (close == std::string::npos ? "" : first.substr(close + 1));
}

LaunchEnv read_launch_env(const EnvLookup& env) {
  LaunchEnv e;
  if (env("RANK") || env("WORLD_SIZE")) {
    e.launcher = "torchrun";
    e.world_size = int_var(env, "WORLD_SIZE", 1, 1);
    e.rank = int_var(env, "RANK", 0, 0);
    e.local_rank = int_var(env, "LOCAL_RANK", e.rank, 0);
    e.local_world_size = int_var(env, "LOCAL_WORLD_SIZE", e.world_size, 1);
    const auto agent = env("TORCHELASTIC_USE_AGENT_STORE");
    e.agent_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
    e.restart = int_var(env, "TORCHELASTIC_RESTART_COUNT", 0, 0);
  } else if (env("SLURM_PROCID") && int_var(env, "SLURM_NTASKS", 1, 1) > 1) {
    // One task is an ordinary single-process job: only several tasks make a distributed run.
    e.launcher = "slurm";
    e.world_size = int_var(env, "SLURM_NTASKS", 1, 1);
    e.rank = int_var(env, "SLURM_PROCID", 0, 0);
    e.local_rank = int_var(env, "SLURM_LOCALID", 0, 0);
    // SLURM_NTASKS_PER_NODE may read "4(x2)": the count before the parenthesis.
    const std::string per_node = env("SLURM_NTASKS_PER_NODE").value_or("");
    e.local_world_size = per_node.empty() ? 1 : std::max(1, std::atoi(per_node.c_str()));
    if (const auto nodes = env("SLURM_JOB_NODELIST"); nodes && !nodes->empty()) e.master_addr = first_slurm_host(*nodes);
    // A port every task of the job derives alike, away from torchrun's default.
    e.master_port = 20000 + int_var(env, "SLURM_JOB_ID", 0, 0) % 20000;
  } else {
    return e;
  }
  if (const auto a = env("MASTER_ADDR"); a && !a->empty()) e.master_addr = *a;
  e.master_port = int_var(env, "MASTER_PORT", e.master_port, 1);
  if (e.master_port > 65535) throw Error("environment: MASTER_PORT=" + std::to_string(e.master_port) + ": not a port (1-65535)");
  if (e.rank >= e.world_size)
    throw Error("environment: rank " + std::to_string(e.rank) + " is not below the world size " + std::to_string(e.world_size));
  return e;
}

LaunchEnv read_launch_env() {
  return read_launch_env([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  });
}

}  // namespace ufp4
