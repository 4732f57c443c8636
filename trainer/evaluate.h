// Loss and perplexity of a model on a dataset: one ordered pass, no gradients.
#pragma once

#include "data/data_pipeline.h"
#include "distributed/group.h"
#include "models/causal_lm.h"
#include "trainer/config.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdint>

namespace fptrain::trainer {

struct EvalResult {
  double loss = 0.0;  // summed token loss / supervised tokens, over the whole pass
  double perplexity = 0.0;
  int64_t supervised_tokens = 0;
  int64_t tokens = 0;
  int64_t examples = 0;
  int64_t micro_batches = 0;
  double seconds = 0.0;
  nlohmann::json to_json() const;
};

// max_micro_batches = 0: the whole stream (per rank). With a group, `data` is
// this rank's share and the sums are combined over the ranks: every rank
// returns the same result.
EvalResult evaluate(const models::CausalLM& model, data::DataPipeline& data, const at::Device& device,
                    int64_t max_micro_batches = 0, distributed::Group* group = nullptr);

// `fptrain eval`: the model of config.model.path on data.eval (or data.train when no eval set is given).
EvalResult evaluate_config(const TrainConfig& config);

}  // namespace fptrain::trainer
