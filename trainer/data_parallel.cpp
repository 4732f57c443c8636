#include "trainer/data_parallel.h"

#include "common/enum_names.h"
#include "common/files.h"
#include "models/parameter_layout.h"
#include "trainer/log/log.h"

#include <c10/core/ScalarType.h>

#include <chrono>
#include <stdexcept>
#include <string>

namespace fptrain::trainer {
namespace fs = std::filesystem;

std::unique_ptr<distributed::Group> join_group(const TrainConfig& config, const DeviceInfo& device,
                                               const distributed::LaunchEnv& env) {
  if (config.distributed.transfers == Transfers::kCopyEngine && !device.device.is_cuda())
    throw std::invalid_argument(config.source + ": distributed.transfers: copy_engine moves data between GPUs, "
                                "but this rank runs on the " + device.device.str() + " (use auto or nccl)");
  distributed::GroupOptions o;
  o.timeout = std::chrono::seconds(config.distributed.timeout);
  o.heartbeat_timeout = std::chrono::seconds(config.distributed.heartbeat_timeout);
  o.nccl = device.device.is_cuda();
  o.device_index = device.device.is_cuda() ? device.device.index() : -1;
  o.transfers = common::enum_name(config.distributed.transfers);
  o.fatal = [](const std::string& message) { log::error(message); };
  auto group = distributed::Group::join(env, o);
  log::info("joined the group as " + env.describe() + "; device " + device.name);
  return group;
}

void check_same_configuration(distributed::Group& group, const TrainConfig& config) {
  group.check_same("configuration (resolved YAML: config files and --set)", to_yaml(config));
}

std::optional<fs::path> agree_on_resume(distributed::Group* group, const TrainConfig& config) {
  if (!group) return resolve_resume(config);
  // Rank 0 decides (the others may see the folder a moment later); "" for a
  // fresh start: a checkpoint path is never empty.
  const auto decided = group->leader_decides("resume", [&] {
    const auto r = resolve_resume(config);
    return r ? r->string() : std::string();
  });
  if (!decided.ok) throw std::invalid_argument(decided.value);
  if (decided.value.empty()) return std::nullopt;
  return fs::path(decided.value);
}

optim::DataParallelSpec data_parallel_spec(distributed::Group* group, const TrainConfig& config,
                                           at::ScalarType dtype, const std::vector<std::string>& names) {
  optim::DataParallelSpec dp;
  // Buckets in one process too: the unit in which lazy gradients are allocated and an
  // offloaded optimizer updates.
  const int64_t mb = config.distributed.bucket_mb_for(group ? group->world_size() : 1);
  dp.bucket_elements = mb * (int64_t{1} << 20) / static_cast<int64_t>(c10::elementSize(dtype));
  if (!group) {
    // Allocation only: a bucket need not hold memory through a later op's backward (v beside
    // o through the attention core's). With ranks, fewer and larger collectives win.
    dp.gradient_groups = models::backward_op_groups(names);
    return dp;
  }
  dp.comm = &group->comm();
  dp.shard = config.distributed.shard_optimizer != ShardOptimizer::kOff;
  return dp;
}

std::unique_ptr<optim::GradReducer> attach_to_group(distributed::Group& group, optim::AdamW& optimizer,
                                                    optim::GradStorage storage, bool release_unowned,
                                                    int64_t released_in_flight) {
  // The flat buffers are laid out alike on every rank: their reduce-scatters and
  // all-gathers may take the copy engines (the all-reduces of the unsharded mode
  // stay on NCCL). Resident gradients are one registered buffer the peers read
  // from; lazy ones (auto's choice) are buckets allocated step by step, pushed
  // into their owners' receive windows, so a rank can free what it does not own.
  if (optimizer.sharded()) {
    optim::FlatGradients& grads = optimizer.flat().gradients();
    if (storage == optim::GradStorage::kResident) {
      grads.set_storage(optim::GradStorage::kResident);
      group.comm().share_buffer(grads.buffer());
    } else {
      grads.set_storage(optim::GradStorage::kLazy);
      group.comm().take_reduce_scatters(grads.largest_bucket_bytes());
    }
    group.comm().share_buffer(optimizer.flat().weights());
  }
  log::info("tensor collectives: " + group.comm().transfers());
  return std::make_unique<optim::GradReducer>(optimizer.flat(), group.comm(), optimizer.sharded(), release_unowned,
                                              released_in_flight);
}

fs::path save_together(distributed::Group& group, const fs::path& output_dir, TrainingState& state, bool sharded,
                       const CommitCheckpoint& commit) {
  const std::string tag = "save/" + std::to_string(state.step) + "/";
  const std::string not_saved = "checkpoint at step " + std::to_string(state.step) + " not saved";
  const auto prepared =
      group.leader_decides(tag + "prepare", [&] { return prepare_checkpoint(output_dir, state.step).string(); });
  if (!prepared.ok) throw std::runtime_error(not_saved + ": rank 0: " + prepared.value);
  const fs::path staging = prepared.value;
  if (sharded) state.optimizer_shards = group.world_size();
  std::string failures;
  const auto written = group.each_reports(tag + "written", [&] {
    if (sharded) write_shard_state(staging, group.rank(), state);
    return std::string();
  });
  for (int r = 0; r < group.world_size(); ++r)
    if (!written[r].ok) failures += "\n  rank " + std::to_string(r) + ": " + written[r].value;
  const auto committed = group.leader_decides(tag + "commit", [&] {
    if (!failures.empty()) {
      try {
        common::remove_tree(staging);
      } catch (const std::exception& e) {
        failures += "\n  rank 0, removing the unfinished checkpoint: " + std::string(e.what());
      }
      throw std::runtime_error(failures);
    }
    TrainingState whole = state;
    if (sharded) whole.optimizer.clear();  // in the ranks' files
    try {
      return commit(staging, whole).string();
    } catch (const std::exception& e) {
      throw std::runtime_error("\n  rank 0: " + std::string(e.what()));
    }
  });
  if (!committed.ok)
    throw std::runtime_error(not_saved + " (the previous one stays the latest):" + committed.value);
  return fs::path(committed.value);
}

}  // namespace fptrain::trainer
