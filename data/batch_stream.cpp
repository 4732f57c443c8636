#include "data/batch_stream.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "data/batch_builder.h"
#include "data/batch_planner.h"

namespace fptrain::data {
namespace {

std::string fingerprint_of(const DataOptions& o, const ExampleSource& src) {
  std::ostringstream s;
  // File names, not paths: a run may resume on a machine that mounts the data elsewhere.
  for (size_t f = 0; f < src.num_files(); ++f)
    s << src.file(f).path().filename().string() << '|' << src.file(f).file_size() << '|' << src.file(f).num_lines() << '|'
      << o.files[f].weight << '|' << common::enum_name(src.format(f)) << ';';
  s << o.max_length << common::enum_name(o.overlong) << src.chat_template_label() << '|' << (src.chat_template() ? src.chat_template()->fingerprint() : 0) << '|'  << common::enum_name(o.loss_mask)
    << common::enum_name(o.batching) << '|' << o.shuffle << '|' << o.seed;
  // The cursor counts examples (flatten, pad) or the packed micro-batches of a
  // window (pack), so it stays valid when the micro-batch size, gradient
  // accumulation or number of ranks change; pack's windows depend on these two.
  if (o.batching == BatchMode::kPack) s << '|' << o.max_tokens << '|' << o.shuffle_window;
  if (o.batching == BatchMode::kFixed)
    s << '|' << o.row_tokens << '|' << o.rows_per_micro_batch << '|' << o.cross_example_attention << '|'
      << o.shuffle_window;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : s.str()) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace

BatchStream::BatchStream(const DataOptions& options, const ExampleSource& source, WorkerPool& pool,
                         int32_t pad_id)
    : options_(options), source_(source), pool_(pool), pad_id_(pad_id),
      fingerprint_(fingerprint_of(options, source)) {
  start_epoch(0, 0);
}

void BatchStream::start_epoch(int64_t epoch, int64_t position) {
  epoch_ = epoch;
  epoch_produced_ = position > 0;  // a resumed epoch has produced steps before
  std::vector<double> weights;
  for (const auto& f : options_.files) weights.push_back(f.weight);
  order_ = make_epoch_order(source_.lines_per_file(), weights, options_.shuffle, options_.seed, epoch);
  if (position < 0 || position > static_cast<int64_t>(order_.size()))
    throw std::runtime_error("data cursor: position " + std::to_string(position) + " is outside epoch " +
                             std::to_string(epoch) + " (" + std::to_string(order_.size()) + " examples)");
  position_ = position;
  lookahead_.clear();
  lookahead_errors_.clear();
  window_.clear();
  window_done_ = 0;
}

void BatchStream::restore(const DataCursor& c) {
  if (c.fingerprint != fingerprint_)
    throw std::runtime_error("data cursor: it was saved with other data files or data options (fingerprint " +
                             c.fingerprint + ", now " + fingerprint_ + "); the data stream cannot be resumed");
  stats_ = c.stats;
  step_ = c.step;
  if (c.epoch >= options_.epochs) {
    finished_ = true;
    epoch_ = c.epoch;
    order_.clear();
    position_ = 0;
    return;
  }
  finished_ = false;
  start_epoch(c.epoch, c.position);
  if (c.window_batches_done > 0) {
    if (!windowed() || !load_group(/*account=*/false) ||
        static_cast<int64_t>(window_.size()) < c.window_batches_done)
      throw std::runtime_error("data cursor: window_batches_done does not match the data");
    for (int64_t i = 0; i < c.window_batches_done; ++i) window_.pop_front();
    window_done_ = c.window_batches_done;
  }
}

DataCursor BatchStream::cursor() const {
  DataCursor c;
  c.epoch = epoch_;
  c.step = step_;
  c.fingerprint = fingerprint_;
  c.stats = stats_;
  if (!window_.empty()) {
    c.position = window_start_;
    c.window_batches_done = window_done_;
  } else {
    c.position = position_;
  }
  return c;
}

std::shared_ptr<const ProcessedExample> BatchStream::next_example(bool account_it) {
  if (lookahead_.empty()) {
    if (cancel_ && cancel_->load(std::memory_order_relaxed)) throw StreamCancelled();
    // Process the next block in parallel; slot i holds example position_ + i.
    const int64_t block = std::max<int64_t>(32, 64 * (pool_.threads() + 1));
    const size_t n = static_cast<size_t>(std::min<int64_t>(block, order_.size() - position_));
    std::vector<std::shared_ptr<const ProcessedExample>> out(n);
    std::vector<std::exception_ptr> errors(n);
    pool_.parallel_for(n, [&](size_t i) {
      try {
        out[i] = std::make_shared<ProcessedExample>(source_.process(order_[position_ + i]));
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
    lookahead_.assign(out.begin(), out.end());
    lookahead_errors_.assign(errors.begin(), errors.end());
  }
  auto ex = std::move(lookahead_.front());
  auto error = lookahead_errors_.front();
  lookahead_.pop_front();
  lookahead_errors_.pop_front();
  if (error) std::rethrow_exception(error);
  ++position_;
  if (account_it) account(*ex);
  return ex;
}

void BatchStream::account(const ProcessedExample& ex) {
  if (ex.status == ExampleStatus::kSkipped && is_bad_line(ex.reason) && options_.bad_lines == BadLinePolicy::kError)
    throw std::runtime_error(source_.where(ex.file, ex.line) + ": " + ex.problem +
                             " (set data.bad_lines: skip to skip such lines)");
  account_example(stats_, ex, source_);
  if (ex.status == ExampleStatus::kSkipped && ex.reason == SkipReason::kZeroSupervised) check_zero_supervised(false);
}

void BatchStream::check_zero_supervised(bool end_of_epoch) const {
  // Mid-epoch, only once enough examples were seen for the fraction to mean something.
  if (!end_of_epoch && stats_.seen < 1000) return;
  data::check_zero_supervised(stats_, options_.max_zero_supervised_fraction, !end_of_epoch);
}

// The planner's micro-batch over the group's examples; fixed mode counts its
// supervised labels exactly, piece by piece.
BatchStream::MicroBatchPlan BatchStream::materialize(
    const PlannedMicroBatch& planned, const std::vector<std::shared_ptr<const ProcessedExample>>& group) const {
  MicroBatchPlan p;
  for (size_t i : planned.items) p.examples.push_back(group[i]);
  p.tokens = planned.tokens;
  p.padding = planned.padding;
  p.supervised = planned.supervised;
  p.started = planned.started;
  p.rank = planned.rank;
  if (options_.batching != BatchMode::kFixed) return p;
  p.supervised = 0;
  for (const auto& planned_row : planned.rows) {
    Row row;
    for (const PlannedPiece& piece : planned_row) {
      row.push_back({group[piece.item].get(), piece.begin, piece.end});
      p.supervised += row_piece_supervised(row.back(), !options_.cross_example_attention || row.size() == 1);
    }
    p.rows.push_back(std::move(row));
  }
  return p;
}

// Reads the next group (plan_group) and queues its planned micro-batches.
bool BatchStream::load_group(bool account_it) {
  const PlanGroup group = plan_group(options_);
  window_start_ = position_;
  window_.clear();
  window_done_ = 0;
  std::vector<std::shared_ptr<const ProcessedExample>> used;
  std::vector<PlanItem> items;
  for (int64_t read = 0; !feed_done() && (group.window ? read : static_cast<int64_t>(used.size())) < group.size;
       ++read) {
    auto ex = next_example(account_it);
    if (!ex->trained()) continue;
    items.push_back({ex->length(), ex->supervised});
    used.push_back(std::move(ex));
  }
  for (const PlannedMicroBatch& planned : plan_group_batches(items, options_, epoch_, window_start_))
    window_.push_back(materialize(planned, used));
  return !window_.empty();
}

std::optional<BatchStream::MicroBatchPlan> BatchStream::next_micro_batch() {
  while (window_.empty()) {
    if (feed_done()) return std::nullopt;
    load_group(/*account=*/true);
  }
  MicroBatchPlan p = std::move(window_.front());
  window_.pop_front();
  ++window_done_;
  return p;
}

PackedBatch BatchStream::build(const MicroBatchPlan& plan) const {
  if (options_.batching == BatchMode::kFixed) return build_row_batch(plan.rows, options_.cross_example_attention);
  std::vector<const ProcessedExample*> exs;
  for (const auto& e : plan.examples) exs.push_back(e.get());
  return options_.batching == BatchMode::kPad ? build_padded_batch(exs, pad_id_) : build_flat_batch(exs);
}

// The compute of a micro-batch as the planner weighs it (example_cost): one
// sequence per example (flatten, pack), per piece of a row (fixed; the whole
// row with cross-example attention), every example as long as the longest (pad).
double BatchStream::work_of(const MicroBatchPlan& plan) const {
  const int64_t a = options_.balance_attention_length;
  double work = 0.0;
  if (options_.batching == BatchMode::kFixed) {
    for (const Row& row : plan.rows) {
      int64_t row_tokens = 0;
      for (const RowPiece& p : row) {
        row_tokens += p.end - p.begin;
        if (!options_.cross_example_attention) work += example_cost(p.end - p.begin, a);
      }
      if (options_.cross_example_attention) work += example_cost(row_tokens, a);
    }
    return work;
  }
  if (options_.batching == BatchMode::kPad)
    return plan.examples.empty() ? 0.0
                                 : static_cast<double>(plan.examples.size()) *
                                       example_cost(plan.tokens / static_cast<int64_t>(plan.examples.size()), a);
  for (const auto& e : plan.examples) work += example_cost(e->length(), a);
  return work;
}

// The rank of each of the step's micro-batches: the planner's where it dealt
// them (then its empty ones go; the ranks are padded with empty ones later),
// else assign_ranks (balanced by tokens in the windowed modes).
std::vector<int> BatchStream::ranks_for(std::vector<MicroBatchPlan>& plans) const {
  std::vector<int> ranks;
  if (!plans.empty() && plans.front().rank >= 0) {
    plans.erase(std::remove_if(plans.begin(), plans.end(), [](const MicroBatchPlan& p) { return p.examples.empty(); }),
                plans.end());
    for (const auto& p : plans) ranks.push_back(p.rank);
    return ranks;
  }
  std::vector<int64_t> tokens;
  for (const auto& p : plans) tokens.push_back(p.tokens);
  return assign_ranks(tokens, options_.world_size, windowed());
}

// The step of `plans` (at least one), as this rank sees it.
TrainStep BatchStream::make_step(std::vector<MicroBatchPlan> plans) const {
  const int W = options_.world_size;
  const std::vector<int> ranks = ranks_for(plans);
  TrainStep s;
  std::vector<size_t> on_rank(W, 0);
  for (int r : ranks) ++on_rank[r];
  const size_t per_rank = *std::max_element(on_rank.begin(), on_rank.end());
  s.rank_tokens.assign(W, 0);
  std::vector<double> rank_work(W, 0.0);
  for (size_t j = 0; j < plans.size(); ++j) {
    s.rank_tokens[ranks[j]] += plans[j].tokens;
    rank_work[ranks[j]] += work_of(plans[j]);
    s.global_examples += plans[j].started;
    s.global_tokens += plans[j].tokens;
    s.global_padding += plans[j].padding;
    s.global_supervised += plans[j].supervised;
    if (ranks[j] == options_.rank) s.micro_batches.push_back(build(plans[j]));
  }
  while (s.micro_batches.size() < per_rank) {
    PackedBatch empty;
    empty.cu_seqlens = {0};
    s.micro_batches.push_back(std::move(empty));
  }
  s.global_micro_batches = static_cast<int64_t>(plans.size());
  const double mean = static_cast<double>(s.global_tokens) / W;
  const int64_t top = *std::max_element(s.rank_tokens.begin(), s.rank_tokens.end());
  s.rank_imbalance = mean > 0 ? static_cast<double>(top) / mean - 1.0 : 0.0;
  s.busiest_rank_work = *std::max_element(rank_work.begin(), rank_work.end());
  for (double w : rank_work) s.mean_rank_work += w / W;
  s.epoch = epoch_;
  return s;
}

void BatchStream::end_epoch() {
  check_zero_supervised(true);
  // An epoch without a single usable example (every line skipped, or no
  // lines): the next ones would be the same, so the stream ends here instead
  // of cycling through epochs forever.
  if (epoch_ + 1 < options_.epochs && epoch_produced_) {
    start_epoch(epoch_ + 1, 0);
    return;
  }
  finished_ = true;
  epoch_ += 1;
  order_.clear();
  position_ = 0;
  lookahead_.clear();
  lookahead_errors_.clear();
}

std::optional<TrainStep> BatchStream::next_step() {
  const size_t want = static_cast<size_t>(options_.world_size * options_.micro_batches_per_step);
  while (!finished_) {
    std::vector<MicroBatchPlan> plans;
    bool epoch_end = false;
    while (plans.size() < want && !epoch_end) {
      auto mb = next_micro_batch();
      if (mb) plans.push_back(std::move(*mb));
      epoch_end = !mb;
    }
    if (window_.empty() && feed_done()) epoch_end = true;
    std::optional<TrainStep> s;
    if (!plans.empty()) {
      s = make_step(std::move(plans));
      epoch_produced_ = true;
    }
    if (epoch_end) end_epoch();
    if (!s) continue;
    s->last_of_epoch = epoch_end;
    s->step = step_++;
    s->cursor = cursor();
    return s;
  }
  return std::nullopt;
}

}  // namespace fptrain::data
