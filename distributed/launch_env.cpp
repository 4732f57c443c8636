#include "distributed/launch_env.h"

#include <cstdlib>
#include <stdexcept>

namespace fptrain::distributed {
namespace {

std::optional<std::string> value(const GetEnv& getenv, const char* name) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int64_t number(const std::string& name, const std::string& text, int64_t lo, int64_t hi) {
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || n < lo || n > hi)
    throw std::invalid_argument(name + "='" + text + "' must be an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
  return n;
}

bool truthy(const std::string& v) { return v == "1" || v == "True" || v == "true" || v == "TRUE"; }

}  // namespace

std::string LaunchEnv::describe() const {
  return "rank " + std::to_string(rank) + "/" + std::to_string(world_size) + " (local " + std::to_string(local_rank) +
         "/" + std::to_string(local_world_size) + "), store " + master_addr + ":" + std::to_string(master_port) +
         (use_agent_store ? " (torchrun's agent store)" : rank == 0 ? " (hosted here)" : "");
}

std::optional<LaunchEnv> read_launch_env(const GetEnv& getenv_in) {
  const GetEnv getenv = getenv_in ? getenv_in : GetEnv([](const char* n) { return std::getenv(n); });
  const auto world = value(getenv, "WORLD_SIZE");
  const auto rank = value(getenv, "RANK");
  if (!world) {
    if (rank && *rank != "0")
      throw std::invalid_argument("RANK=" + *rank + " is set but WORLD_SIZE is not; set both (or launch with torchrun)");
    return std::nullopt;
  }
  LaunchEnv env;
  env.world_size = static_cast<int>(number("WORLD_SIZE", *world, 1, 1 << 20));
  if (!rank && env.world_size > 1)
    throw std::invalid_argument("WORLD_SIZE=" + *world + " is set but RANK is not; set RANK=0.." +
                                std::to_string(env.world_size - 1) + " for each process (or launch with torchrun)");
  env.rank = rank ? static_cast<int>(number("RANK", *rank, 0, env.world_size - 1)) : 0;
  if (env.world_size == 1) return std::nullopt;  // one process: no store, no group

  const auto local_rank = value(getenv, "LOCAL_RANK");
  const auto local_world = value(getenv, "LOCAL_WORLD_SIZE");
  env.local_world_size =
      local_world ? static_cast<int>(number("LOCAL_WORLD_SIZE", *local_world, 1, env.world_size)) : env.world_size;
  // Without LOCAL_RANK every process is taken to be on one node (rank = local rank).
  env.local_rank = local_rank ? static_cast<int>(number("LOCAL_RANK", *local_rank, 0, env.local_world_size - 1))
                              : env.rank % env.local_world_size;

  const auto addr = value(getenv, "MASTER_ADDR");
  if (!addr)
    throw std::invalid_argument("WORLD_SIZE=" + *world +
                                " but MASTER_ADDR is not set: set MASTER_ADDR (the host of rank 0) and MASTER_PORT, "
                                "or launch with torchrun");
  env.master_addr = *addr;
  if (const auto port = value(getenv, "MASTER_PORT"))
    env.master_port = static_cast<uint16_t>(number("MASTER_PORT", *port, 1, 65535));
  env.under_torchrun = value(getenv, "TORCHELASTIC_RUN_ID").has_value();
  if (const auto agent = value(getenv, "TORCHELASTIC_USE_AGENT_STORE"); agent && truthy(*agent)) {
    env.use_agent_store = true;
    const auto restarts = value(getenv, "TORCHELASTIC_RESTART_COUNT");
    env.store_prefix = "/worker/attempt_" + (restarts ? std::to_string(number("TORCHELASTIC_RESTART_COUNT", *restarts, 0,
                                                                              1 << 30))
                                                      : std::string("0"));
  }
  return env;
}

}  // namespace fptrain::distributed
