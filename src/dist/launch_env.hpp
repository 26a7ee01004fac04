// Who this process is in the job, read from the environment a launcher set:
// hetpar's own local launcher, torchrun (--no-python), or Slurm's srun.
#pragma once

#include <optional>
#include <string>

namespace hetpar {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 0;  // ranks on this node; 0 when the launcher does not say
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  // A launcher agent hosts the store (torchrun's agent store, hetpar's local
  // launcher): every rank is then a client. Otherwise rank 0 hosts it.
  bool agent_store = false;
  std::string launcher;  // "local", "torchrun", "slurm"
};

// Variables the local launcher sets on its children.
inline constexpr const char* kLocalLauncherVar = "HETPAR_LOCAL_LAUNCHER";

// Reads RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT (or Slurm's
// SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID with MASTER_ADDR/MASTER_PORT).
// Returns nullopt when none is set (a plain command-line start); throws
// std::runtime_error naming the variable when one is set but bad or missing.
std::optional<LaunchEnv> read_launch_env();

}  // namespace hetpar
