#include "data/epoch_plan.h"

#include <algorithm>
#include <exception>
#include <stdexcept>

#include "data/data_stats.h"

namespace fptrain::data {

void process_each(const ExampleSource& source, WorkerPool& pool, const std::vector<ExampleRef>& refs,
                  const std::function<void(size_t, const ProcessedExample&)>& each) {
  const size_t block = 4096;
  std::vector<ProcessedExample> done(block);
  for (size_t start = 0; start < refs.size(); start += block) {
    const size_t n = std::min(block, refs.size() - start);
    std::vector<std::exception_ptr> errors(n);
    pool.parallel_for(n, [&](size_t i) {
      try {
        done[i] = source.process(refs[start + i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
    for (size_t i = 0; i < n; ++i) {
      if (errors[i]) std::rethrow_exception(errors[i]);
      each(start + i, done[i]);
    }
  }
}

std::vector<PlannedMicroBatch> plan_epoch(const std::vector<ExampleSummary>& items, const DataOptions& o,
                                          int64_t epoch) {
  const PlanGroup group = plan_group(o);
  std::vector<PlannedMicroBatch> out;
  std::vector<PlanItem> pending;
  size_t group_start = 0;
  auto plan_pending = [&](size_t next_start) {
    for (PlannedMicroBatch& mb : plan_group_batches(pending, o, epoch, static_cast<int64_t>(group_start)))
      out.push_back(std::move(mb));
    pending.clear();
    group_start = next_start;
  };
  for (size_t i = 0; i < items.size(); ++i) {
    if (group.window && static_cast<int64_t>(i - group_start) == group.size) plan_pending(i);
    if (items[i].trained) pending.push_back({items[i].length, items[i].supervised});
    if (!group.window && static_cast<int64_t>(pending.size()) == group.size) plan_pending(i + 1);
  }
  plan_pending(items.size());
  return out;
}

int64_t count_steps(const DataOptions& options, std::shared_ptr<const tokenizer::Tokenizer> tokenizer) {
  validate_options(options);
  ExampleSource source(options, tokenizer.get());
  // Every line once, in file order.
  std::vector<std::vector<ExampleSummary>> per_file(source.num_files());
  WorkerPool pool(options.workers);
  DataStats stats;
  for (size_t f = 0; f < source.num_files(); ++f) {
    if (options.files[f].weight == 0) continue;
    std::vector<ExampleRef> refs;
    for (size_t line = 0; line < source.file(f).num_lines(); ++line)
      refs.push_back(ExampleRef::make(static_cast<uint32_t>(f), line));
    per_file[f].resize(refs.size());
    process_each(source, pool, refs, [&](size_t i, const ProcessedExample& ex) {
      if (ex.status == ExampleStatus::kSkipped && is_bad_line(ex.reason) && options.bad_lines == BadLinePolicy::kError)
        throw std::runtime_error(source.where(ex.file, ex.line) + ": " + ex.problem +
                                 " (set data.bad_lines: skip to skip such lines)");
      account_example(stats, ex, source);
      per_file[f][i] = {ex.trained(), ex.length(), ex.supervised};
    });
  }
  check_zero_supervised(stats, options.max_zero_supervised_fraction, /*so_far=*/false);

  std::vector<double> weights;
  for (const auto& f : options.files) weights.push_back(f.weight);
  const int64_t per_step = options.world_size * options.micro_batches_per_step;
  int64_t steps = 0;
  for (int64_t epoch = 0; epoch < options.epochs; ++epoch) {
    const auto order = make_epoch_order(source.lines_per_file(), weights, options.shuffle, options.seed, epoch);
    std::vector<ExampleSummary> items;
    items.reserve(order.size());
    for (ExampleRef r : order) items.push_back(per_file[r.file()][r.line()]);
    const auto mbs = static_cast<int64_t>(plan_epoch(items, options, epoch).size());
    steps += (mbs + per_step - 1) / per_step;
  }
  return steps;
}

}  // namespace fptrain::data
