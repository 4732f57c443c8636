// An embedding whose weight gradient the backward adds straight into the
// weight's slot of the trainer's flat gradients (models/grad_sink_linear.h).
//
// With plain autograd the embedding's backward materialises a [vocab, hidden]
// gradient and AccumulateGrad adds it to the slot: a vocab x hidden transient at
// the end of the backward, when every other gradient is held (250 MB on a 7B
// with 32k tokens, 1 GB with 128k). Here the backward sums the rows of the tokens
// present only, [distinct tokens, hidden], with ATen's own embedding backward over
// the tokens renumbered in order (the same sums in the same order: the same bits),
// and adds them into the slot (zeroed first when the step has not written it).
#pragma once

#include "models/grad_sink_linear.h"

#include <ATen/ATen.h>

namespace fptrain::models {

// at::embedding(weight, ids, padding_idx) with the weight gradient sent to `sink`
// when it is non-null, has a grad view and the weight requires a gradient.
at::Tensor sink_embedding(const at::Tensor& weight, const at::Tensor& ids, int64_t padding_idx, GradSink* sink);

}  // namespace fptrain::models
