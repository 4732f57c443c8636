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
    if (!windowed() || !load_window(/*account=*/false) ||
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

BatchStream::MicroBatchPlan BatchStream::make_plan(std::vector<std::shared_ptr<const ProcessedExample>> exs) const {
  MicroBatchPlan p;
  int64_t longest = 0, sum = 0;
  for (const auto& e : exs) {
    longest = std::max(longest, e->length());
    sum += e->length();
    p.supervised += e->supervised;
  }
  p.tokens = options_.batching == BatchMode::kPad ? longest * static_cast<int64_t>(exs.size()) : sum;
  p.padding = p.tokens - sum;
  p.started = static_cast<int64_t>(exs.size());
  p.examples = std::move(exs);
  return p;
}

bool BatchStream::load_window(bool account_it) {
  window_start_ = position_;
  window_.clear();
  window_done_ = 0;
  std::vector<std::shared_ptr<const ProcessedExample>> used;
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < options_.shuffle_window && !feed_done(); ++i) {
    auto ex = next_example(account_it);
    if (!ex->trained()) continue;
    lengths.push_back(ex->length());
    used.push_back(std::move(ex));
  }
  if (options_.batching == BatchMode::kFixed) {
    plan_rows(used);
    return !window_.empty();
  }
  for (const auto& bin : plan_pack_window(lengths, options_.max_tokens, options_.seed, epoch_, window_start_)) {
    std::vector<std::shared_ptr<const ProcessedExample>> exs;
    for (size_t i : bin) exs.push_back(used[i]);
    window_.push_back(make_plan(std::move(exs)));
  }
  return !window_.empty();
}

// Fixed mode: the window's examples, in stream order, concatenated and cut into
// rows of row_tokens, rows_per_micro_batch of them a micro-batch; only the
// window's last row and micro-batch may be shorter.
void BatchStream::plan_rows(const std::vector<std::shared_ptr<const ProcessedExample>>& examples) {
  const bool cross = options_.cross_example_attention;
  MicroBatchPlan plan;
  Row row;
  int64_t room = options_.row_tokens;
  auto flush_plan = [&] {
    if (plan.rows.empty()) return;
    for (const Row& r : plan.rows)
      for (size_t q = 0; q < r.size(); ++q) {
        plan.tokens += r[q].end - r[q].begin;
        plan.supervised += row_piece_supervised(r[q], !cross || q == 0);
        plan.started += r[q].begin == 0;
      }
    window_.push_back(std::move(plan));
    plan = MicroBatchPlan{};
  };
  auto close_row = [&] {
    if (!row.empty()) plan.rows.push_back(std::move(row));
    row.clear();
    room = options_.row_tokens;
    if (static_cast<int64_t>(plan.rows.size()) == options_.rows_per_micro_batch) flush_plan();
  };
  for (const auto& ex : examples) {
    for (int64_t at = 0; at < ex->length();) {
      const int64_t take = std::min(room, ex->length() - at);
      row.push_back({ex.get(), at, at + take});
      if (plan.examples.empty() || plan.examples.back() != ex) plan.examples.push_back(ex);  // keeps it alive
      at += take;
      room -= take;
      if (room == 0) close_row();
    }
  }
  close_row();
  flush_plan();
}

std::optional<BatchStream::MicroBatchPlan> BatchStream::next_micro_batch() {
  if (windowed()) {
    while (window_.empty()) {
      if (feed_done()) return std::nullopt;
      load_window(/*account=*/true);
    }
    MicroBatchPlan p = std::move(window_.front());
    window_.pop_front();
    ++window_done_;
    return p;
  }
  std::vector<std::shared_ptr<const ProcessedExample>> exs;
  while (static_cast<int64_t>(exs.size()) < options_.examples_per_micro_batch && !feed_done()) {
    auto ex = next_example(/*account=*/true);
    if (ex->trained()) exs.push_back(std::move(ex));
  }
  if (exs.empty()) return std::nullopt;
  return make_plan(std::move(exs));
}

PackedBatch BatchStream::build(const MicroBatchPlan& plan) const {
  if (options_.batching == BatchMode::kFixed) return build_row_batch(plan.rows, options_.cross_example_attention);
  std::vector<const ProcessedExample*> exs;
  for (const auto& e : plan.examples) exs.push_back(e.get());
  return options_.batching == BatchMode::kPad ? build_padded_batch(exs, pad_id_) : build_flat_batch(exs);
}

// The step's examples, dealt to the ranks by cost (deal_to_ranks: equal
// compute per rank, each rank's examples in micro-batches of equal tokens).
std::vector<BatchStream::MicroBatchPlan> BatchStream::balance_across_ranks(std::vector<MicroBatchPlan> plans,
                                                                          std::vector<int>& ranks) const {
  std::vector<std::shared_ptr<const ProcessedExample>> pool;
  std::vector<int64_t> lengths;
  for (auto& p : plans)
    for (auto& e : p.examples) {
      lengths.push_back(e->length());
      pool.push_back(std::move(e));
    }
  std::vector<MicroBatchPlan> out;
  ranks.clear();
  for (const DealtMicroBatch& mb : deal_to_ranks(lengths, options_.world_size, options_.examples_per_micro_batch,
                                                 options_.balance_attention_length)) {
    if (mb.examples.empty()) continue;  // the rank's step is padded with empty micro-batches below
    std::vector<std::shared_ptr<const ProcessedExample>> exs;
    for (size_t i : mb.examples) exs.push_back(pool[i]);
    out.push_back(make_plan(std::move(exs)));
    ranks.push_back(mb.rank);
  }
  return out;
}

std::optional<TrainStep> BatchStream::next_step() {
  const size_t want = static_cast<size_t>(options_.world_size * options_.micro_batches_per_step);
  while (!finished_) {
    std::vector<MicroBatchPlan> plans;
    bool epoch_end = false;
    while (plans.size() < want) {
      auto mb = next_micro_batch();
      if (!mb) {
        epoch_end = true;
        break;
      }
      plans.push_back(std::move(*mb));
    }
    if (!epoch_end && window_.empty() && feed_done()) epoch_end = true;

    TrainStep s;
    if (!plans.empty()) {
      const int W = options_.world_size;
      std::vector<int> ranks;
      if (options_.batching == BatchMode::kFlatten && W > 1 && options_.balance_ranks) {
        plans = balance_across_ranks(std::move(plans), ranks);
      } else {
        std::vector<int64_t> tokens;
        for (const auto& p : plans) tokens.push_back(p.tokens);
        ranks = assign_ranks(tokens, W, windowed());
      }
      std::vector<size_t> on_rank(W, 0);
      for (int r : ranks) ++on_rank[r];
      const size_t per_rank = *std::max_element(on_rank.begin(), on_rank.end());
      s.rank_tokens.assign(W, 0);
      for (size_t j = 0; j < plans.size(); ++j) {
        s.rank_tokens[ranks[j]] += plans[j].tokens;
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
      s.epoch = epoch_;
    }
    if (!plans.empty()) epoch_produced_ = true;
    if (epoch_end) {
      check_zero_supervised(true);
      // An epoch without a single usable example (every line skipped, or no
      // lines): the next ones would be the same, so the stream ends here
      // instead of cycling through epochs forever.
      if (epoch_ + 1 >= options_.epochs || !epoch_produced_) {
        finished_ = true;
        epoch_ += 1;
        order_.clear();
        position_ = 0;
        lookahead_.clear();
        lookahead_errors_.clear();
      } else {
        start_epoch(epoch_ + 1, 0);
      }
    }
    if (plans.empty()) continue;
    s.last_of_epoch = epoch_end;
    s.step = step_++;
    s.cursor = cursor();
    return s;
  }
  return std::nullopt;
}

}  // namespace fptrain::data
