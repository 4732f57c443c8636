// The trainer's side of data parallelism, apart from the step itself: joining
// the group (configurations compared), agreeing on where to resume, wiring the
// optimizer's flat buffers and gradient reducer to the group, and saving one
// checkpoint together. Every exchange is a typed distributed::Group call
// (leader_decides, each_reports); the step's reductions are GradReducer's and
// AdamW's.
#pragma once

#include "distributed/group.h"
#include "distributed/launch_env.h"
#include "optim/adamw.h"
#include "optim/grad_reducer.h"
#include "trainer/checkpoint_store.h"
#include "trainer/config.h"
#include "trainer/device_info.h"

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fptrain::trainer {

// Joins the group of `env`.
std::unique_ptr<distributed::Group> join_group(const TrainConfig& config, const DeviceInfo& device,
                                               const distributed::LaunchEnv& env);
// Every rank must train the same thing: throws unless every rank resolved the
// same configuration (the error names the rank that differs). Called once the
// group is the run's, whose failure path lets the others read the verdict.
void check_same_configuration(distributed::Group& group, const TrainConfig& config);

// Where to resume (resume: auto/PATH/none): rank 0 decides, all follow; without
// a group, this process decides.
std::optional<std::filesystem::path> agree_on_resume(distributed::Group* group, const TrainConfig& config);

// How the optimizer takes part (sharding, bucket size in elements of `dtype`);
// the one-process spec without a group, whose buckets also close between the
// backward ops of the trained tensors `names` (models::backward_op_groups).
optim::DataParallelSpec data_parallel_spec(distributed::Group* group, const TrainConfig& config,
                                           at::ScalarType dtype, const std::vector<std::string>& names);

// After the optimizer exists: its flat buffers shared with the group's
// transfers (sharded mode), and the reducer of its gradients (releasing the
// buckets this rank does not own where `release_unowned` applies, at most
// `released_in_flight` of them still read by their pushes: GradReducer).
std::unique_ptr<optim::GradReducer> attach_to_group(distributed::Group& group, optim::AdamW& optimizer,
                                                    optim::GradStorage storage, bool release_unowned,
                                                    int64_t released_in_flight);

// A checkpoint of the whole group: rank 0 prepares a hidden folder, every rank
// writes its optimizer shard into it (`sharded`), and only when all succeeded
// does rank 0 `commit` it (add the model, rename it into place); otherwise it
// is removed and the previous checkpoint stays the latest. Returns the folder.
using CommitCheckpoint = std::function<std::filesystem::path(const std::filesystem::path& staging,
                                                             const TrainingState& whole)>;
std::filesystem::path save_together(distributed::Group& group, const std::filesystem::path& output_dir,
                                    TrainingState& state, bool sharded, const CommitCheckpoint& commit);

}  // namespace fptrain::trainer
