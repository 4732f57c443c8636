// Who this process is in a data-parallel group, from the environment that
// torchrun, Slurm scripts or a person set: RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and torchrun's agent store
// (TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_RESTART_COUNT). Free of LibTorch.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace fptrain::distributed {

struct LaunchEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  std::string master_addr;
  uint16_t master_port = 29500;
  // torchrun's agent already hosts a TCP store at MASTER_ADDR:MASTER_PORT:
  // every rank connects as a client under store_prefix.
  bool use_agent_store = false;
  std::string store_prefix;  // "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>" with the agent store
  bool under_torchrun = false;

  bool distributed() const { return world_size > 1; }
  std::string describe() const;  // "rank 1/4 (local 1/2), store host:port"
};

// Reads the variables through `getenv` (std::getenv by default). nullopt when
// WORLD_SIZE is unset or 1 and no rank variable says otherwise: a
// single-process run. Throws std::invalid_argument naming the variable for an
// inconsistent launch (WORLD_SIZE without MASTER_ADDR, RANK >= WORLD_SIZE, a
// non-numeric value, ...).
using GetEnv = std::function<const char*(const char*)>;
std::optional<LaunchEnv> read_launch_env(const GetEnv& getenv = nullptr);

}  // namespace fptrain::distributed
