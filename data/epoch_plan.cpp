#include "data/epoch_plan.h"

#include <algorithm>
#include <exception>
#include <stdexcept>

#include "data/batch_planner.h"
#include "data/data_stats.h"
#include "data/epoch_order.h"
#include "data/example_source.h"
#include "data/worker_pool.h"

namespace fptrain::data {
namespace {

std::vector<MicroBatchSummary> plan_fixed(const std::vector<ExampleSummary>& items, int64_t n, bool pad) {
  std::vector<MicroBatchSummary> out;
  int64_t count = 0, sum = 0, longest = 0, sup = 0;
  auto flush = [&] {
    if (count == 0) return;
    const int64_t tokens = pad ? longest * count : sum;
    out.push_back({tokens, tokens - sum, sup});
    count = sum = longest = sup = 0;
  };
  for (const ExampleSummary& it : items) {
    if (!it.trained) continue;
    ++count;
    sum += it.length;
    sup += it.supervised;
    longest = std::max(longest, it.length);
    if (count == n) flush();
  }
  flush();
  return out;
}

// Flatten with balance_ranks and several ranks, as BatchStream deals a step:
// the step's examples (world x micro_batches_per_step groups of n) go to the
// ranks by cost, world x k micro-batches a step (empty ones included, so a
// full step is per_step of them as in the other modes).
std::vector<MicroBatchSummary> plan_flatten_balanced(const std::vector<ExampleSummary>& items, const DataOptions& o) {
  const size_t per_step =
      static_cast<size_t>(o.examples_per_micro_batch) * static_cast<size_t>(o.world_size * o.micro_batches_per_step);
  std::vector<const ExampleSummary*> trained;
  for (const ExampleSummary& it : items)
    if (it.trained) trained.push_back(&it);
  std::vector<MicroBatchSummary> out;
  for (size_t start = 0; start < trained.size(); start += per_step) {
    const size_t end = std::min(trained.size(), start + per_step);
    std::vector<int64_t> lengths;
    for (size_t i = start; i < end; ++i) lengths.push_back(trained[i]->length);
    for (const DealtMicroBatch& dealt : deal_to_ranks(lengths, o.world_size, o.examples_per_micro_batch,
                                                         o.balance_attention_length)) {
      MicroBatchSummary mb;
      mb.rank = dealt.rank;
      for (size_t i : dealt.examples) {
        mb.tokens += trained[start + i]->length;
        mb.supervised += trained[start + i]->supervised;
      }
      out.push_back(mb);
    }
  }
  return out;
}

std::vector<MicroBatchSummary> plan_pack(const std::vector<ExampleSummary>& items, const DataOptions& o,
                                         int64_t epoch) {
  std::vector<MicroBatchSummary> out;
  const auto window = static_cast<size_t>(o.shuffle_window);
  for (size_t start = 0; start < items.size(); start += window) {
    const size_t end = std::min(items.size(), start + window);
    std::vector<int64_t> lengths, sup;
    for (size_t i = start; i < end; ++i)
      if (items[i].trained) {
        lengths.push_back(items[i].length);
        sup.push_back(items[i].supervised);
      }
    for (const auto& bin : plan_pack_window(lengths, o.max_tokens, o.seed, epoch, static_cast<int64_t>(start))) {
      MicroBatchSummary mb;
      for (size_t i : bin) {
        mb.tokens += lengths[i];
        mb.supervised += sup[i];
      }
      out.push_back(mb);
    }
  }
  return out;
}

// Fixed mode, as BatchStream cuts each window: its trained tokens in rows of
// row_tokens, rows_per_micro_batch a micro-batch, only the last one short.
// Supervised tokens are shared out by tokens (the report's estimate; the
// stream counts them exactly).
std::vector<MicroBatchSummary> plan_rows(const std::vector<ExampleSummary>& items, const DataOptions& o) {
  std::vector<MicroBatchSummary> out;
  const auto window = static_cast<size_t>(o.shuffle_window);
  const int64_t per_mb = o.row_tokens * o.rows_per_micro_batch;
  for (size_t start = 0; start < items.size(); start += window) {
    int64_t tokens = 0, sup = 0;
    for (size_t i = start; i < std::min(items.size(), start + window); ++i)
      if (items[i].trained) {
        tokens += items[i].length;
        sup += items[i].supervised;
      }
    for (int64_t done = 0; done < tokens; done += per_mb) {
      MicroBatchSummary mb;
      mb.tokens = std::min(per_mb, tokens - done);
      mb.supervised = sup * mb.tokens / tokens;
      out.push_back(mb);
    }
  }
  return out;
}

}  // namespace

std::vector<MicroBatchSummary> plan_epoch(const std::vector<ExampleSummary>& items, BatchMode mode,
                                          const DataOptions& o, int64_t epoch) {
  if (mode == BatchMode::kPack) return plan_pack(items, o, epoch);
  if (mode == BatchMode::kFixed) return plan_rows(items, o);
  if (mode == BatchMode::kFlatten && o.world_size > 1 && o.balance_ranks) return plan_flatten_balanced(items, o);
  return plan_fixed(items, o.examples_per_micro_batch, mode == BatchMode::kPad);
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
    const size_t n = source.file(f).num_lines();
    per_file[f].resize(n);
    const size_t block = 4096;
    std::vector<ProcessedExample> done(block);
    for (size_t start = 0; start < n; start += block) {
      const size_t m = std::min(block, n - start);
      std::vector<std::exception_ptr> errors(m);
      pool.parallel_for(m, [&](size_t i) {
        try {
          done[i] = source.process(ExampleRef::make(static_cast<uint32_t>(f), start + i));
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
      for (size_t i = 0; i < m; ++i) {
        if (errors[i]) std::rethrow_exception(errors[i]);
        const ProcessedExample& ex = done[i];
        if (ex.status == ExampleStatus::kSkipped && is_bad_line(ex.reason) &&
            options.bad_lines == BadLinePolicy::kError)
          throw std::runtime_error(source.where(ex.file, ex.line) + ": " + ex.problem +
                                   " (set data.bad_lines: skip to skip such lines)");
        account_example(stats, ex, source);
        per_file[f][start + i] = {ex.trained(), ex.length(), ex.supervised};
      }
    }
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
    const auto mbs = static_cast<int64_t>(plan_epoch(items, options.batching, options, epoch).size());
    steps += (mbs + per_step - 1) / per_step;
  }
  return steps;
}

}  // namespace fptrain::data
