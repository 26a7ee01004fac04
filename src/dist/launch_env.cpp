#include "dist/launch_env.hpp"

#include <cstdlib>
#include <stdexcept>

namespace hetpar {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int env_int(const char* name, int min_value, int max_value = 1 << 20) {
  const char* v = env(name);
  if (!v) throw std::runtime_error(std::string("environment variable ") + name + " is not set");
  char* end = nullptr;
  const long value = std::strtol(v, &end, 10);
  if (*end != '\0' || value < min_value || value > max_value) {
    throw std::runtime_error(std::string("environment variable ") + name + "=\"" + v + "\" is not an integer in [" +
                             std::to_string(min_value) + ", " + std::to_string(max_value) + "]");
  }
  return static_cast<int>(value);
}

}  // namespace

std::optional<LaunchEnv> read_launch_env() {
  LaunchEnv e;
  if (env("RANK") || env("WORLD_SIZE")) {
    e.rank = env_int("RANK", 0);
    e.world_size = env_int("WORLD_SIZE", 1);
    e.local_rank = env("LOCAL_RANK") ? env_int("LOCAL_RANK", 0) : 0;
    e.local_world_size = env("LOCAL_WORLD_SIZE") ? env_int("LOCAL_WORLD_SIZE", 1) : 0;
    e.launcher = env(kLocalLauncherVar) ? "local" : "torchrun";
  } else if (env("SLURM_PROCID") && env("SLURM_NTASKS")) {
    e.rank = env_int("SLURM_PROCID", 0);
    e.world_size = env_int("SLURM_NTASKS", 1);
    e.local_rank = env("SLURM_LOCALID") ? env_int("SLURM_LOCALID", 0) : 0;
    e.local_world_size = env("SLURM_NTASKS_PER_NODE") ? env_int("SLURM_NTASKS_PER_NODE", 1) : 0;
    e.launcher = "slurm";
  } else {
    return std::nullopt;
  }
  if (e.rank >= e.world_size) {
    throw std::runtime_error("rank " + std::to_string(e.rank) + " is not below world size " +
                             std::to_string(e.world_size));
  }
  if (const char* addr = env("MASTER_ADDR")) e.master_addr = addr;
  else if (e.world_size > 1) throw std::runtime_error("environment variable MASTER_ADDR is not set");
  e.master_port = e.world_size > 1 || env("MASTER_PORT") ? env_int("MASTER_PORT", 1, 65535) : 0;
  const char* agent = env("TORCHELASTIC_USE_AGENT_STORE");
  e.agent_store = agent && std::string(agent) == "True";
  return e;
}

}  // namespace hetpar
