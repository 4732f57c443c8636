// Out of memory while a run sets up (loading the model, allocating the optimizer
// state): what the weights and optimizer state need per rank against the device's
// memory, and the settings that need less, each with its size.
#pragma once

#include "models/model_config.h"
#include "trainer/config.h"

#include <cstdint>
#include <string>

namespace fptrain::trainer {

// Bytes per rank of what set-up allocates for full fine-tuning of `params` parameters in
// `dtype_bytes`-byte weights: weights and gradients, and the optimizer state (fp32 masters
// and moments with master weights, the masters as 16-bit remainders when `split`, else
// moments in the model dtype; with `moments_8bit` a byte per moment and an fp32 absmax per
// 256), split over `ranks` when sharded.
int64_t full_tuning_state_bytes(int64_t params, int64_t dtype_bytes, bool master_weights, int64_t ranks,
                                bool sharded, bool split = false, bool moments_8bit = false);
// The same split by memory with optimizer.offload: cpu: the device keeps weights and
// gradients; the host (pinned) the optimizer state and a copy of the rank's weights.
struct OffloadedBytes {
  int64_t device = 0, host = 0;
};
OffloadedBytes offloaded_state_bytes(int64_t params, int64_t dtype_bytes, bool master_weights, int64_t ranks,
                                     bool sharded, bool split = false, bool moments_8bit = false);
// The device staging of optimizer.offload_update: device: two slots, each the state of one
// piece of `piece_elements` (optim/streamed_step.h).
int64_t offload_staging_bytes(int64_t piece_elements, int64_t dtype_bytes, bool master_weights, bool split,
                              bool moments_8bit);
// The largest piece the device update streams: a bucket (this rank's slice when sharded), at
// most optim::kStreamChunk elements.
int64_t offload_piece_elements(const TrainConfig& config, int64_t dtype_bytes, int64_t ranks);

// The error's text: the phase, the estimate against `device_bytes` for weights of `dtype_bytes`,
// the settings that need less with their sizes, and LibTorch's message.
std::string setup_oom_message(const std::string& phase, const TrainConfig& config, const models::ModelConfig& model,
                              int64_t dtype_bytes, int64_t ranks, int64_t device_bytes,
                              const std::string& torch_message);

}  // namespace fptrain::trainer
