#include "trainer/evaluate.h"

#include "models/model_config.h"
#include "trainer/device_batch.h"
#include "trainer/device_info.h"
#include "trainer/log/log.h"
#include "trainer/model_setup.h"

#include <c10/core/GradMode.h>

#include <chrono>
#include <cmath>
#include <stdexcept>

namespace fptrain::trainer {

nlohmann::json EvalResult::to_json() const {
  return {{"loss", loss},         {"perplexity", perplexity}, {"supervised_tokens", supervised_tokens},
          {"tokens", tokens},     {"examples", examples},     {"micro_batches", micro_batches},
          {"seconds", seconds}};
}

EvalResult evaluate(const models::CausalLM& model, data::DataPipeline& data, const at::Device& device,
                    int64_t max_micro_batches, distributed::Group* group) {
  const auto start = std::chrono::steady_clock::now();
  c10::NoGradGuard no_grad;
  EvalResult r;
  // Sums stay on the device; one read at the end.
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
  bool done = false;
  while (!done) {
    auto step = data.next_step();
    if (!step) break;
    for (const auto& mb : step->micro_batches) {
      if (mb.num_tokens == 0) continue;
      const DeviceBatch b = to_device(mb, device);
      loss_sum += model.loss(b.input, b.labels, b.labels_host).loss_sum.to(at::kDouble);
      r.supervised_tokens += b.num_supervised;
      r.tokens += b.num_tokens - b.num_padding;
      r.examples += b.num_examples;
      ++r.micro_batches;
      if (max_micro_batches > 0 && r.micro_batches >= max_micro_batches) {
        done = true;
        break;
      }
    }
  }
  double total = loss_sum.item<double>();
  if (group) {  // sums in rank order: the same result on every rank
    const std::vector<double> sums = group->sum_over_ranks(
        {total, static_cast<double>(r.supervised_tokens), static_cast<double>(r.tokens),
         static_cast<double>(r.examples), static_cast<double>(r.micro_batches)});
    total = sums[0];
    r.supervised_tokens = static_cast<int64_t>(sums[1]);  // counts below 2^53: exact in a double
    r.tokens = static_cast<int64_t>(sums[2]);
    r.examples = static_cast<int64_t>(sums[3]);
    r.micro_batches = static_cast<int64_t>(sums[4]);
  }
  if (r.supervised_tokens == 0) throw std::runtime_error("evaluation: the data has no supervised tokens");
  r.loss = total / static_cast<double>(r.supervised_tokens);
  r.perplexity = std::exp(r.loss);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

EvalResult evaluate_config(const TrainConfig& config) {
  const DeviceInfo dev = resolve_device(config.device, config.cpu_threads);
  LoadedModel m = open_model(config, dev.device, config.model.path, /*trainable=*/false);
  auto tokenizer = load_checked_tokenizer(config.model.path, m.config);
  TrainConfig c = config;
  if (c.data.eval.empty()) {
    log::info("data.eval is not set: evaluating on data.train");
    c.data.eval = c.data.train;
  }
  data::DataPipeline data(make_data_options(c, /*eval=*/true), tokenizer);
  return evaluate(*m.model, data, dev.device, config.logging.eval_max_batches);
}

}  // namespace fptrain::trainer
