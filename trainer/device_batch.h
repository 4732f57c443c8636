// A data::PackedBatch (host vectors) as the tensors the model takes, on the
// training device. Host-side counts travel along so the loop never reads them
// back from the device.
#pragma once

#include "data/packed_batch.h"
#include "models/causal_lm.h"

#include <ATen/ATen.h>

namespace fptrain::trainer {

struct DeviceBatch {
  models::PackedInput input;
  at::Tensor labels;  // int64 [T], unshifted, -100 = ignored
  at::Tensor labels_host;  // the same on the host (the fused loss plans its chunks from it without a device read)
  int64_t num_examples = 0;
  int64_t num_tokens = 0;  // padding included
  int64_t num_padding = 0;
  int64_t num_supervised = 0;
};

// Copies through pinned host memory with non-blocking transfers on CUDA.
// Checks the batch's shape invariants (lengths agree, cu_seqlens valid).
DeviceBatch to_device(const data::PackedBatch& batch, const at::Device& device);

}  // namespace fptrain::trainer
