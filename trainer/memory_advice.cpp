#include "trainer/memory_advice.h"

#include "common/byte_units.h"

#include <algorithm>
#include <vector>

namespace fptrain::trainer {
namespace {

// Bytes per parameter of the optimizer state: an fp32 master (split masters: a 16-bit
// remainder) and two fp32 moments, or two moments in the model dtype; 8-bit moments are a
// byte each and an fp32 absmax per optim::blockwise8::kBlock (256) elements each.
constexpr int64_t kMasterBytes = 4, kSplitMasterBytes = 2, kFp32MomentBytes = 8;
constexpr int64_t kMomentBlock = 256, kAbsmaxBytes = 4;

int64_t moment_bytes_8bit(int64_t params) {
  return 2 * params + 2 * kAbsmaxBytes * ((params + kMomentBlock - 1) / kMomentBlock);
}
// What may be taken before activations for a setting to count as fitting.
constexpr int64_t kFitPercent = 90;

// A QLoRA base: the projections at 4.13 bits per weight (NF4 + double-quantised maxima, models/nf4.h),
// the embeddings and head in the model dtype (norms are negligible).
int64_t qlora_base_bytes(const models::ModelConfig& m, int64_t dtype_bytes) {
  const int64_t embeddings = m.vocab_size * m.hidden_size * (m.tie_word_embeddings ? 1 : 2);
  return (m.num_parameters() - embeddings) * 413 / 800 + embeddings * dtype_bytes;
}

struct Option {
  std::string setting;
  int64_t bytes;
};

std::string fits(int64_t bytes, int64_t device_bytes) {
  const bool fit = device_bytes > 0 && bytes < device_bytes / 100 * kFitPercent;
  return common::gib_text(bytes) + (fit ? " (fits, before activations)" : "");
}

// The settings that keep less optimizer state on the device, each with its bytes per rank
// (offloading first: it keeps none).
std::vector<Option> state_options(const optim::OptimizerSection& o, int64_t params, int64_t bytes, int64_t ranks,
                                  bool sharded) {
  const bool eight = o.moments == optim::Moments::k8bit;
  std::vector<Option> options;
  const OffloadedBytes off = offloaded_state_bytes(params, bytes, o.master_weights, ranks, sharded, o.split_masters, eight);
  options.push_back({"optimizer.offload: cpu (masters and moments in pinned host memory: about " +
                         common::gib_text(off.host) + " of host memory per rank; the same training)",
                     off.device});
  const bool can_split = o.master_weights && bytes == 2 && !o.split_masters;
  if (can_split)
    options.push_back({"optimizer.master_weights: split (the same training, 2 bytes less per parameter)",
                       full_tuning_state_bytes(params, bytes, true, ranks, sharded, /*split=*/true, eight)});
  if (!eight) {
    options.push_back({"optimizer.state_dtype: int8 (bitsandbytes' AdamW8bit moments, about 2 bytes per parameter "
                       "instead of " + std::to_string(o.master_weights && bytes < 4 ? kFp32MomentBytes : 2 * bytes) + ")",
                       full_tuning_state_bytes(params, bytes, o.master_weights, ranks, sharded, o.split_masters, true)});
    if (can_split)
      options.push_back({"optimizer.master_weights: split and optimizer.state_dtype: int8 (fp32 masters, 8-bit moments)",
                         full_tuning_state_bytes(params, bytes, true, ranks, sharded, true, true)});
  }
  if (o.master_weights && bytes < 4)
    options.push_back({"optimizer.master_weights: false (bf16 AdamW)",
                       full_tuning_state_bytes(params, bytes, false, ranks, sharded, false, eight)});
  for (int64_t more : {2, 4, 8})
    if (more > ranks)
      options.push_back({std::to_string(more) + " GPUs with the optimizer state sharded (torchrun --nproc_per_node " +
                             std::to_string(more) + ")",
                         full_tuning_state_bytes(params, bytes, o.master_weights, more, true, o.split_masters, eight)});
  return options;
}

}  // namespace

int64_t full_tuning_state_bytes(int64_t params, int64_t dtype_bytes, bool master_weights, int64_t ranks,
                                bool sharded, bool split, bool moments_8bit) {
  const bool masters = master_weights && dtype_bytes < 4;
  const int64_t master = !masters ? 0 : split && dtype_bytes == 2 ? kSplitMasterBytes : kMasterBytes;
  const int64_t moments = moments_8bit ? moment_bytes_8bit(params)
                                       : params * (masters ? kFp32MomentBytes : 2 * dtype_bytes);
  const int64_t shards = sharded && ranks > 1 ? ranks : 1;
  return params * 2 * dtype_bytes + (params * master + moments) / shards;
}

OffloadedBytes offloaded_state_bytes(int64_t params, int64_t dtype_bytes, bool master_weights, int64_t ranks,
                                     bool sharded, bool split, bool moments_8bit) {
  const int64_t device = params * 2 * dtype_bytes;
  const int64_t shards = sharded && ranks > 1 ? ranks : 1;
  const int64_t state =
      full_tuning_state_bytes(params, dtype_bytes, master_weights, ranks, sharded, split, moments_8bit) - device;
  return {device, state + params * dtype_bytes / shards};
}

int64_t offload_staging_bytes(int64_t piece_elements, int64_t dtype_bytes, bool master_weights, bool split,
                              bool moments_8bit) {
  const int64_t state = full_tuning_state_bytes(piece_elements, dtype_bytes, master_weights, 1, false, split,
                                                moments_8bit) -
                        piece_elements * 2 * dtype_bytes;
  return 2 * state;
}

int64_t offload_piece_elements(const TrainConfig& config, int64_t dtype_bytes, int64_t ranks) {
  const bool sharded = config.distributed.shard_optimizer != ShardOptimizer::kOff && ranks > 1;
  const int64_t bucket = (config.distributed.bucket_mb_for(ranks) << 20) / dtype_bytes / (sharded ? ranks : 1);
  return std::min(bucket, optim::kStreamChunk);
}

std::string setup_oom_message(const std::string& phase, const TrainConfig& config, const models::ModelConfig& model,
                              int64_t bytes, int64_t ranks, int64_t device_bytes, const std::string& torch_message) {
  const int64_t params = model.num_parameters();
  const bool sharded = config.distributed.shard_optimizer != ShardOptimizer::kOff;
  std::string msg = "out of memory while " + phase + " (" + model.architecture + ", " +
                    std::to_string(params / 1000000) + "M parameters; the device has " +
                    (device_bytes > 0 ? common::gib_text(device_bytes) : std::string("unknown memory")) + "). ";
  if (config.adapter.type == AdapterType::kQlora) {
    msg += "The 4-bit base takes about " + common::gib_text(qlora_base_bytes(model, bytes)) +
           ": it needs a GPU with more memory.";
  } else if (config.adapter.type == AdapterType::kLora) {
    msg += "The frozen base alone takes about " + common::gib_text(params * bytes) + " in " +
           std::to_string(8 * bytes) + " bits: use adapter.type: qlora (about " +
           common::gib_text(qlora_base_bytes(model, bytes)) + ") or a GPU with more memory.";
  } else {
    const optim::OptimizerSection& o = config.optimizer;
    const bool eight = o.moments == optim::Moments::k8bit;
    const bool offloaded = o.offload == optim::Offload::kCpu;
    const bool staged = offloaded && optim::resolved_offload_update(o) == optim::OffloadUpdate::kDevice;
    const int64_t staging = staged ? offload_staging_bytes(offload_piece_elements(config, bytes, ranks), bytes,
                                                           o.master_weights, o.split_masters, eight)
                                   : 0;
    const int64_t now = offloaded ? params * 2 * bytes + staging
                                  : full_tuning_state_bytes(params, bytes, o.master_weights, ranks, sharded,
                                                            o.split_masters, eight);
    msg += "Full fine-tuning needs about " + common::gib_text(now) + " per rank for weights, gradients" +
           (!offloaded ? " and optimizer state"
            : staged   ? " and the device update's staging (the optimizer state is in host memory)"
                       : " (the optimizer state is in host memory)") +
           " before any activation. Settings that need less:";
    std::vector<Option> options = offloaded ? std::vector<Option>{} : state_options(o, params, bytes, ranks, sharded);
    options.push_back({"adapter.type: lora (a frozen base and small adapters)", params * bytes});
    options.push_back({"adapter.type: qlora (a 4-bit base)", qlora_base_bytes(model, bytes)});
    for (const Option& o : options) msg += "\n  - " + o.setting + ": about " + fits(o.bytes, device_bytes);
  }
  return msg + "\n" + torch_message;
}

}  // namespace fptrain::trainer
