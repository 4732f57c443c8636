#include "data/data_report.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ostream>

#include "data/batch_planner.h"
#include "data/epoch_order.h"
#include "data/epoch_plan.h"
#include "data/example_source.h"
#include "data/worker_pool.h"

namespace fptrain::data {
namespace {

// Epoch 0 planned in `mode`, summarised.
BatchingReport summarize(BatchMode mode, const std::vector<ExampleSummary>& items, DataOptions o) {
  o.batching = mode;
  const std::vector<PlannedMicroBatch> mbs = plan_epoch(items, o, 0);
  BatchingReport r;
  r.mode = mode;
  r.micro_batches = static_cast<int64_t>(mbs.size());
  const size_t per_step = static_cast<size_t>(o.world_size * o.micro_batches_per_step);
  int64_t full_steps = 0;
  double step_tokens_sum = 0, step_sup_sum = 0, imb_sum = 0;
  for (size_t s = 0; s < mbs.size(); s += per_step) {
    const size_t e = std::min(mbs.size(), s + per_step);
    std::vector<int64_t> tokens;
    int64_t step_tokens = 0, step_sup = 0;
    for (size_t j = s; j < e; ++j) {
      tokens.push_back(mbs[j].tokens);
      step_tokens += mbs[j].tokens;
      step_sup += mbs[j].supervised;
      r.tokens += mbs[j].tokens;
      r.padding += mbs[j].padding;
    }
    ++r.steps;
    if (e - s < per_step && r.steps > 1) continue;  // the partial last step is not representative
    ++full_steps;
    step_tokens_sum += static_cast<double>(step_tokens);
    step_sup_sum += static_cast<double>(step_sup);
    r.tokens_per_step_min = full_steps == 1 ? step_tokens : std::min(r.tokens_per_step_min, step_tokens);
    r.tokens_per_step_max = std::max(r.tokens_per_step_max, step_tokens);
    // The planner's ranks where it decided them (flatten, balanced), else as BatchStream assigns them.
    const bool balanced = mode == BatchMode::kPack || mode == BatchMode::kFixed;
    std::vector<int> rank = assign_ranks(tokens, o.world_size, balanced);
    for (size_t j = s; j < e; ++j)
      if (mbs[j].rank >= 0) rank[j - s] = mbs[j].rank;
    std::vector<int64_t> load(o.world_size, 0);
    for (size_t j = 0; j < tokens.size(); ++j) load[rank[j]] += tokens[j];
    const double mean = static_cast<double>(step_tokens) / o.world_size;
    const double imb = mean > 0 ? static_cast<double>(*std::max_element(load.begin(), load.end())) / mean - 1 : 0;
    imb_sum += imb;
    r.rank_imbalance_max = std::max(r.rank_imbalance_max, imb);
  }
  if (full_steps > 0) {
    r.tokens_per_step = step_tokens_sum / full_steps;
    r.supervised_per_step = step_sup_sum / full_steps;
    r.rank_imbalance_mean = imb_sum / full_steps;
  }
  r.padding_fraction = r.tokens > 0 ? static_cast<double>(r.padding) / r.tokens : 0;
  if (mode == BatchMode::kPack && r.micro_batches > 0)
    r.fill_rate = static_cast<double>(r.tokens) / (static_cast<double>(r.micro_batches) * o.max_tokens);
  return r;
}

int64_t percentile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t i = std::min(sorted.size() - 1, static_cast<size_t>(q * static_cast<double>(sorted.size())));
  return sorted[i];
}

}  // namespace

DataReport make_data_report(const DataOptions& options, std::shared_ptr<const tokenizer::Tokenizer> tokenizer) {
  DataOptions o = options;
  validate_options([&] {  // pack's own checks only matter when pack is the training mode
    DataOptions v = o;
    v.batching = BatchMode::kFlatten;
    return v;
  }());
  ExampleSource source(o, tokenizer.get());
  DataReport rep;
  rep.chat_template = source.chat_template_label();
  for (size_t f = 0; f < source.num_files(); ++f)
    rep.files.push_back({source.file(f).path().string(), common::enum_name(source.format(f)),
                         static_cast<int64_t>(source.file(f).num_lines()), o.files[f].weight});

  std::vector<double> weights;
  for (const auto& f : o.files) weights.push_back(f.weight);
  const auto order = make_epoch_order(source.lines_per_file(), weights, o.shuffle, o.seed, 0);
  std::vector<ExampleSummary> items(order.size());
  WorkerPool pool(o.workers);
  const auto t0 = std::chrono::steady_clock::now();
  process_each(source, pool, order, [&](size_t i, const ProcessedExample& ex) {
    account_example(rep.stats, ex, source);
    items[i] = {ex.trained(), ex.length(), ex.supervised};
  });
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const DataStats& s = rep.stats;
  rep.bad_lines_would_stop = o.bad_lines == BadLinePolicy::kError &&
                             s.skipped_total() > s.skipped[static_cast<int>(SkipReason::kZeroSupervised)];
  rep.zero_supervised_over_limit = s.seen > 0 && static_cast<double>(s.skipped[static_cast<int>(SkipReason::kZeroSupervised)]) >
                                                     o.max_zero_supervised_fraction * static_cast<double>(s.seen);
  std::vector<int64_t> lengths;
  for (const ExampleSummary& it : items)
    if (it.trained) lengths.push_back(it.length);
  std::sort(lengths.begin(), lengths.end());
  if (!lengths.empty()) {
    rep.length_min = lengths.front();
    rep.length_max = lengths.back();
    rep.length_mean = static_cast<double>(s.tokens) / static_cast<double>(lengths.size());
    rep.length_p50 = percentile(lengths, 0.5);
    rep.length_p90 = percentile(lengths, 0.9);
    rep.length_p99 = percentile(lengths, 0.99);
    // Power-of-two buckets from 1 up to max_length.
    for (int64_t e = 1; e < o.max_length; e *= 2) rep.histogram_edges.push_back(e);
    rep.histogram_edges.push_back(o.max_length);
    rep.histogram_edges.push_back(o.max_length + 1);
    rep.histogram_counts.assign(rep.histogram_edges.size() - 1, 0);
    for (int64_t len : lengths) {
      const size_t b = std::upper_bound(rep.histogram_edges.begin(), rep.histogram_edges.end(), len) -
                       rep.histogram_edges.begin() - 1;
      ++rep.histogram_counts[std::min(b, rep.histogram_counts.size() - 1)];
    }
  }
  rep.supervised_fraction = s.tokens > 0 ? static_cast<double>(s.supervised_tokens) / s.tokens : 0;

  rep.batching.push_back(summarize(BatchMode::kFlatten, items, o));
  rep.batching.push_back(summarize(BatchMode::kPad, items, o));
  if (o.max_tokens >= o.max_length) {
    rep.batching.push_back(summarize(BatchMode::kPack, items, o));
  } else {
    BatchingReport r;
    r.mode = BatchMode::kPack;
    r.available = false;
    rep.batching.push_back(r);
  }
  if (o.row_tokens >= 2)  // fixed rows only where configured: they have no default length
    rep.batching.push_back(summarize(BatchMode::kFixed, items, o));
  return rep;
}

void print_data_stats(std::ostream& out, const DataStats& s) {
  char line[512];
  std::snprintf(line, sizeof line,
                "%lld examples seen: %lld used, %lld truncated, %lld dropped (too long), %lld skipped\n",
                (long long)s.seen, (long long)s.used, (long long)s.truncated, (long long)s.dropped,
                (long long)s.skipped_total());
  out << line;
  for (int k = 0; k < kNumSkipReasons; ++k) {
    if (s.skipped[k] == 0) continue;
    out << "  skipped " << common::enum_name(static_cast<SkipReason>(k)) << ": " << s.skipped[k] << " (first:";
    for (const auto& w : s.first_skipped[k]) out << " " << w;
    out << ")\n";
  }
  if (s.dropped > 0) {
    out << "  dropped, first:";
    for (const auto& w : s.first_dropped) out << " " << w;
    out << "\n";
  }
}

void print_data_report(std::ostream& out, const DataReport& r) {
  char line[512];
  out << "Data files:\n";
  for (const auto& f : r.files) {
    std::snprintf(line, sizeof line, "  %-50s %-18s %10lld lines  weight %.2f\n", f.path.c_str(), f.format.c_str(),
                  static_cast<long long>(f.lines), f.weight);
    out << line;
  }
  out << "Chat template: " << r.chat_template << "\n\n";
  out << "One epoch: ";
  print_data_stats(out, r.stats);
  const DataStats& s = r.stats;
  if (r.bad_lines_would_stop)
    out << "  NOTE: with bad_lines: error, training stops at the first bad line above\n";
  if (r.zero_supervised_over_limit)
    out << "  NOTE: more examples without supervised tokens than max_zero_supervised_fraction: training stops\n";
  std::snprintf(line, sizeof line,
                "Tokens: %lld (%lld supervised, %.1f%%), %lld cut by truncation\n"
                "Length (tokens): min %lld  mean %.1f  p50 %lld  p90 %lld  p99 %lld  max %lld\n",
                (long long)s.tokens, (long long)s.supervised_tokens, 100.0 * r.supervised_fraction,
                (long long)s.truncated_tokens, (long long)r.length_min, r.length_mean, (long long)r.length_p50,
                (long long)r.length_p90, (long long)r.length_p99, (long long)r.length_max);
  out << line;
  int64_t top = 1;
  for (int64_t c : r.histogram_counts) top = std::max(top, c);
  for (size_t b = 0; b < r.histogram_counts.size(); ++b) {
    if (r.histogram_counts[b] == 0) continue;
    const int bar = static_cast<int>(50.0 * r.histogram_counts[b] / top + 0.5);
    std::snprintf(line, sizeof line, "  [%5lld, %5lld) %9lld %s\n", (long long)r.histogram_edges[b],
                  (long long)r.histogram_edges[b + 1], (long long)r.histogram_counts[b], std::string(bar, '#').c_str());
    out << line;
  }
  out << "\nBatching (per optimizer step: world_size x micro_batches_per_step micro-batches):\n";
  std::snprintf(line, sizeof line, "  %-8s %9s %7s %9s %8s %14s %14s %10s\n", "mode", "micro-bs", "steps", "padding",
                "fill", "tokens/step", "superv./step", "rank imb.");
  out << line;
  for (const auto& b : r.batching) {
    if (!b.available) {
      out << "  " << common::enum_name(b.mode) << ": needs max_tokens >= max_length\n";
      continue;
    }
    std::snprintf(line, sizeof line, "  %-8s %9lld %7lld %8.1f%% %8s %14.0f %14.0f %9.1f%%\n", common::enum_name(b.mode),
                  (long long)b.micro_batches, (long long)b.steps, 100.0 * b.padding_fraction,
                  b.mode == BatchMode::kPack ? (std::to_string(static_cast<int>(100.0 * b.fill_rate + 0.5)) + "%").c_str()
                                             : "-",
                  b.tokens_per_step, b.supervised_per_step, 100.0 * b.rank_imbalance_max);
    out << line;
  }
  std::snprintf(line, sizeof line, "\nTokenized in %.2f s (%.0f examples/s)\n", r.seconds,
                r.seconds > 0 ? static_cast<double>(s.seen) / r.seconds : 0.0);
  out << line;
}

nlohmann::json data_report_json(const DataReport& r) {
  nlohmann::json files = nlohmann::json::array(), modes = nlohmann::json::array();
  for (const auto& f : r.files)
    files.push_back({{"path", f.path}, {"format", f.format}, {"lines", f.lines}, {"weight", f.weight}});
  for (const auto& b : r.batching)
    modes.push_back({{"mode", common::enum_name(b.mode)},
                     {"available", b.available},
                     {"micro_batches", b.micro_batches},
                     {"steps", b.steps},
                     {"tokens", b.tokens},
                     {"padding", b.padding},
                     {"padding_fraction", b.padding_fraction},
                     {"fill_rate", b.fill_rate},
                     {"tokens_per_step", b.tokens_per_step},
                     {"tokens_per_step_min", b.tokens_per_step_min},
                     {"tokens_per_step_max", b.tokens_per_step_max},
                     {"supervised_per_step", b.supervised_per_step},
                     {"rank_imbalance_mean", b.rank_imbalance_mean},
                     {"rank_imbalance_max", b.rank_imbalance_max}});
  return {{"files", files},
          {"chat_template", r.chat_template},
          {"stats", r.stats.to_json()},
          {"bad_lines_would_stop", r.bad_lines_would_stop},
          {"zero_supervised_over_limit", r.zero_supervised_over_limit},
          {"length", {{"min", r.length_min}, {"max", r.length_max}, {"mean", r.length_mean}, {"p50", r.length_p50},
                      {"p90", r.length_p90}, {"p99", r.length_p99}}},
          {"histogram", {{"edges", r.histogram_edges}, {"counts", r.histogram_counts}}},
          {"supervised_fraction", r.supervised_fraction},
          {"batching", modes},
          {"seconds", r.seconds}};
}

}  // namespace fptrain::data
