#include "trainer/metrics.h"

#include "trainer/log/log.h"

#include "common/byte_units.h"
#include "common/json_input.h"
#include "data/data_report.h"
#include "models/model_dtype.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace fptrain::trainer {
namespace fs = std::filesystem;
namespace {


// Keeps the records of steps <= keep_step (a resumed run rewrites the later ones).
void truncate_after(const fs::path& path, int64_t keep_step) {
  std::ifstream in(path);
  if (!in) return;
  std::vector<std::string> kept;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (common::json_nesting_exceeds(line, common::kMaxJsonDepth)) {  // not ours: kept as it is
      kept.push_back(line);
      continue;
    }
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step") && j["step"].is_number_integer() &&
        j["step"].get<int64_t>() > keep_step)
      continue;
    kept.push_back(line);
  }
  in.close();
  std::ofstream out(path, std::ios::trunc);
  for (const auto& l : kept) out << l << '\n';
}

}  // namespace

double rank_balance(double mean_work, double busiest_work) {
  return busiest_work > 0 ? mean_work / busiest_work : 1.0;
}

std::string format_count(double v) {
  char buf[32];
  if (v >= 1e9) std::snprintf(buf, sizeof buf, "%.2fB", v / 1e9);
  else if (v >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  else std::snprintf(buf, sizeof buf, "%llds", (long long)s);
  return buf;
}

MetricsLogger::MetricsLogger(const fs::path& output_dir, int64_t total_steps, int64_t num_parameters,
                             const DeviceInfo& device, int64_t resume_step, MetricsScope scope)
    : path_(output_dir / "metrics.jsonl"),
      scope_(std::move(scope)),
      total_steps_(total_steps),
      num_parameters_(num_parameters),
      device_(device),
      start_step_(resume_step),
      started_(std::chrono::steady_clock::now()) {
  if (!scope_.writer) return;
  fs::create_directories(output_dir);
  if (resume_step > 0) truncate_after(path_, resume_step);
  else fs::remove(path_);
  out_.open(path_, std::ios::app);
  if (!out_) throw std::runtime_error(path_.string() + ": cannot open for writing");
}

void MetricsLogger::write(const nlohmann::json& j) {
  if (!scope_.writer) return;
  out_ << j.dump() << '\n';
  out_.flush();
}

MemoryStats MetricsLogger::peak_memory() const {
  MemoryStats m = memory_stats(device_.device);
  if (scope_.max_over_ranks) {
    const std::vector<int64_t> top =
        scope_.max_over_ranks({m.peak_allocated_bytes, m.peak_reserved_bytes, m.peak_rss_bytes});
    m.peak_allocated_bytes = top.at(0);
    m.peak_reserved_bytes = top.at(1);
    m.peak_rss_bytes = top.at(2);
  }
  return m;
}

void MetricsLogger::record(const StepRecord& r, int64_t log_interval, bool force) {
  pending_.push_back(r);
  if (force || r.step % log_interval == 0 || r.step == total_steps_) flush_interval();
}

void MetricsLogger::flush_interval() {
  if (pending_.empty()) return;
  const Interval v = sum_interval();
  write(interval_record(v));
  if (scope_.writer) log::info(progress_line(v));
  pending_.clear();
}

MetricsLogger::Interval MetricsLogger::sum_interval() {
  // One synchronization per log line: all losses of the interval at once.
  std::vector<at::Tensor> losses;
  for (const auto& p : pending_) losses.push_back(p.loss);
  const at::Tensor host = at::stack(losses).to(at::kDouble).cpu();
  const double* lv = host.data_ptr<double>();
  Interval v;
  double loss_sum = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    const auto& p = pending_[i];
    loss_sum += lv[i];
    v.seconds += p.step_seconds;
    v.wait += p.data_wait_seconds;
    if (p.comm) v.comm += p.comm->seconds();
    v.tokens += p.tokens - p.padding;
    v.padding += p.padding;
    v.supervised += p.supervised;
    v.examples += p.examples;
    v.busiest_work += p.busiest_rank_work;
    v.mean_work += p.mean_rank_work;
    if (!totals_.first_loss) totals_.first_loss = lv[i];
    totals_.last_loss = lv[i];
    totals_.min_loss = std::min(totals_.min_loss.value_or(lv[i]), lv[i]);
  }
  const StepRecord& last = pending_.back();
  v.n = static_cast<double>(pending_.size());
  v.loss = loss_sum / v.n;
  if (!std::isfinite(v.loss))
    throw std::runtime_error("the training loss became " + std::to_string(v.loss) + " by step " +
                             std::to_string(last.step) +
                             " (diverged: lower optimizer.lr, keep optimizer.grad_clip on, or check the data); "
                             "checkpoints in the run folder predate it");
  v.grad_norm = last.grad_norm.defined() ? last.grad_norm.item<double>() : 0.0;
  v.tps = v.seconds > 0 ? v.tokens / v.seconds : 0.0;
  v.sps = v.seconds > 0 ? v.supervised / v.seconds : 0.0;
  v.pad_frac = (v.tokens + v.padding) > 0 ? static_cast<double>(v.padding) / (v.tokens + v.padding) : 0.0;
  v.tps_gpu = v.tps / scope_.world_size;  // tokens are the whole group's; MFU is per GPU
  if (device_.peak_bf16_flops) v.mfu = 6.0 * static_cast<double>(num_parameters_) * v.tps_gpu / *device_.peak_bf16_flops;
  v.mem = peak_memory();

  totals_.steps += static_cast<int64_t>(pending_.size());
  totals_.examples += v.examples;
  totals_.tokens += v.tokens;
  totals_.supervised += v.supervised;
  totals_.padding += v.padding;
  totals_.seconds += v.seconds;
  totals_.data_wait_seconds += v.wait;
  totals_.busiest_rank_work += v.busiest_work;
  totals_.mean_rank_work += v.mean_work;
  const double per_step = totals_.seconds / std::max<int64_t>(1, totals_.steps);
  v.eta = per_step * static_cast<double>(std::max<int64_t>(0, total_steps_ - last.step));
  return v;
}

nlohmann::json MetricsLogger::interval_record(const Interval& v) const {
  const StepRecord& last = pending_.back();
  nlohmann::json j = {{"step", last.step},
                      {"epoch", last.epoch},
                      {"loss", v.loss},
                      {"lr", last.lr},
                      {"grad_norm", v.grad_norm},
                      {"tokens_per_s", v.tps},
                      {"supervised_tokens_per_s", v.sps},
                      {"padding_fraction", v.pad_frac},
                      {"mfu", v.mfu ? nlohmann::json(*v.mfu) : nlohmann::json(nullptr)},
                      {"step_time_s", v.seconds / v.n},
                      {"data_wait_s", v.wait / v.n},
                      {"examples", v.examples},
                      {"tokens", v.tokens},
                      {"supervised_tokens", v.supervised},
                      {"steps_in_record", pending_.size()},
                      {"peak_rss_bytes", v.mem.peak_rss_bytes},
                      {"elapsed_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count()}};
  if (device_.device.is_cuda()) {
    j["peak_allocated_bytes"] = v.mem.peak_allocated_bytes;
    j["peak_reserved_bytes"] = v.mem.peak_reserved_bytes;
  }
  if (scope_.world_size > 1) {
    j["world_size"] = scope_.world_size;
    j["tokens_per_s_per_gpu"] = v.tps_gpu;
    j["exposed_comm_s"] = v.comm / v.n;  // per step
    j["rank_balance"] = rank_balance(v.mean_work, v.busiest_work);
  }
  return j;
}

// "step 120/1000 | loss 1.2345 | lr 2e-05 | grad 0.812 | 10.3k tok/s | ... | ETA 1h02m"
std::string MetricsLogger::progress_line(const Interval& v) const {
  const StepRecord& last = pending_.back();
  std::ostringstream line;
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %lld/%lld | loss %.4f | lr %.3g | grad %.3f | %s tok/s | sup %s tok/s",
                (long long)last.step, (long long)total_steps_, v.loss, last.lr, v.grad_norm,
                format_count(v.tps).c_str(), format_count(v.sps).c_str());
  line << buf;
  if (scope_.world_size > 1) {
    std::snprintf(buf, sizeof buf, " (%s per %s)", format_count(v.tps_gpu).c_str(),
                  device_.device.is_cuda() ? "GPU" : "rank");
    line << buf;
  }
  if (v.pad_frac > 0) {
    std::snprintf(buf, sizeof buf, " | pad %.1f%%", 100 * v.pad_frac);
    line << buf;
  }
  if (v.mfu) {
    std::snprintf(buf, sizeof buf, " | MFU %.1f%%", 100 * *v.mfu);
    line << buf;
  }
  std::snprintf(buf, sizeof buf, " | %.0f ms/step (data %.0f ms", 1000 * v.seconds / v.n, 1000 * v.wait / v.n);
  line << buf;
  if (scope_.world_size > 1) {
    std::snprintf(buf, sizeof buf, ", comm %.0f ms", 1000 * v.comm / v.n);
    line << buf;
  }
  line << ")";
  if (device_.device.is_cuda()) {
    std::snprintf(buf, sizeof buf, " | mem %.1f/%.1f GiB", common::gib(static_cast<double>(v.mem.peak_allocated_bytes)),
                  common::gib(static_cast<double>(v.mem.peak_reserved_bytes)));
  } else {
    std::snprintf(buf, sizeof buf, " | rss %.2f GiB", common::gib(static_cast<double>(v.mem.peak_rss_bytes)));
  }
  line << buf << " | ETA " << format_duration(v.eta);
  return line.str();
}

void MetricsLogger::record_eval(int64_t step, double loss, int64_t supervised_tokens, double seconds) {
  flush_interval();
  totals_.last_eval_loss = loss;
  nlohmann::json j = {{"event", "eval"},         {"step", step},
                      {"eval_loss", loss},       {"eval_perplexity", std::exp(loss)},
                      {"eval_supervised_tokens", supervised_tokens}, {"eval_seconds", seconds}};
  write(j);
  if (!scope_.writer) return;
  char buf[256];
  std::snprintf(buf, sizeof buf, "eval at step %lld: loss %.4f | perplexity %.2f | %lld supervised tokens in %s",
                (long long)step, loss, std::exp(loss), (long long)supervised_tokens, format_duration(seconds).c_str());
  log::info(buf);
}

void MetricsLogger::note(const std::string& event, const nlohmann::json& fields) {
  flush_interval();
  nlohmann::json j = fields;
  j["event"] = event;
  write(j);
}

nlohmann::json MetricsLogger::summary() const {
  const MemoryStats mem = peak_memory();
  const double tps = totals_.seconds > 0 ? totals_.tokens / totals_.seconds : 0.0;
  nlohmann::json j = {{"steps", totals_.steps},
                      {"examples", totals_.examples},
                      {"tokens", totals_.tokens},
                      {"supervised_tokens", totals_.supervised},
                      {"padding_tokens", totals_.padding},
                      {"train_seconds", totals_.seconds},
                      {"data_wait_seconds", totals_.data_wait_seconds},
                      {"tokens_per_s", tps},
                      {"supervised_tokens_per_s", totals_.seconds > 0 ? totals_.supervised / totals_.seconds : 0.0},
                      {"num_parameters", num_parameters_},
                      {"device", device_.name},
                      {"peak_rss_bytes", mem.peak_rss_bytes}};
  j["world_size"] = scope_.world_size;
  j["tokens_per_s_per_gpu"] = tps / scope_.world_size;
  if (scope_.world_size > 1) j["rank_balance"] = rank_balance(totals_.mean_rank_work, totals_.busiest_rank_work);
  if (device_.peak_bf16_flops) {
    j["mfu"] = 6.0 * static_cast<double>(num_parameters_) * tps / scope_.world_size / *device_.peak_bf16_flops;
    j["peak_bf16_flops"] = *device_.peak_bf16_flops;
  }
  if (device_.device.is_cuda()) {
    j["peak_allocated_bytes"] = mem.peak_allocated_bytes;
    j["peak_reserved_bytes"] = mem.peak_reserved_bytes;
  }
  if (totals_.first_loss) j["first_loss"] = *totals_.first_loss;
  if (totals_.last_loss) j["last_loss"] = *totals_.last_loss;
  if (totals_.min_loss) j["min_loss"] = *totals_.min_loss;
  if (totals_.last_eval_loss) j["eval_loss"] = *totals_.last_eval_loss;
  return j;
}

void log_run_banner(const TrainConfig& config, const models::ModelConfig& mc, const DeviceInfo& device,
                    at::ScalarType dtype, attention::Backend backend, bool master_weights, int64_t total_steps) {
  const std::string params = format_count(static_cast<double>(mc.num_parameters()));
  log::info("model " + config.model.path + ": " + mc.architecture + ", " + params + " parameters, " +
            std::to_string(mc.num_hidden_layers) + " layers, hidden " + std::to_string(mc.hidden_size) + ", vocab " +
            std::to_string(mc.vocab_size));
  const Checkpointing& ckpt = config.model.activation_checkpointing;
  log::info("device " + device.name + " | dtype " + models::dtype_name(dtype) + " | attention " +
            std::string(attention::backend_name(backend)) + " | AdamW " +
            (!master_weights ? "in " + models::dtype_name(dtype)
             : config.optimizer.split_masters && dtype == at::kBFloat16
                 ? std::string("with fp32 master weights (split: the bf16 weights and 16-bit remainders)")
                 : std::string("with fp32 master weights")) +
            (config.optimizer.moments == optim::Moments::k8bit ? ", 8-bit moments (bitsandbytes' AdamW8bit)" : "") +
            (ckpt != Checkpointing::none() ? " | activation checkpointing " + ckpt.name() : std::string()) +
            (ckpt != Checkpointing::none() && config.model.recompute != Recompute::kAuto
                 ? std::string(", recompute ") + common::enum_name(config.model.recompute)
                 : std::string()));
  const data::BatchMode mode = config.batching.mode;
  const int64_t row = config.batching.row_tokens > 0 ? config.batching.row_tokens : config.data.max_length;
  const std::string unit =
      mode == data::BatchMode::kPack    ? std::to_string(config.batching.max_tokens) + " tokens"
      : mode == data::BatchMode::kFixed ? std::to_string(config.batching.rows_per_micro_batch) + " rows of " +
                                              std::to_string(row) + " tokens (" +
                                              (config.batching.cross_example_attention ? "one sequence per row"
                                                                                       : "positions per example") +
                                              ")"
                                        : std::to_string(config.batching.examples_per_micro_batch) + " examples";
  log::info("batching " + std::string(common::enum_name(mode)) + " | " + unit +
            " per micro-batch x " + std::to_string(config.batching.grad_accumulation) +
            " micro-batches per step | " + std::to_string(total_steps) + " steps | output " + config.output_dir);
  if (device.peak_bf16_flops) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "MFU = 6 x %s parameters x tokens/s over the %s's dense bf16 peak of %.0f TFLOP/s",
                  params.c_str(), device.name.c_str(), *device.peak_bf16_flops / 1e12);
    log::info(buf);
  } else if (device.device.is_cuda()) {
    log::info("MFU not reported: the bf16 peak of " + device.name + " is unknown");
  }
}

void log_run_summary(const MetricsLogger& metrics, const nlohmann::json& summary, const data::DataStats& stats,
                     const fs::path& summary_path, double wall_seconds) {
  const RunTotals& t = metrics.totals();
  char buf[128];
  std::string line = "done: " + std::to_string(summary.value("steps_completed", int64_t{0})) + "/" +
                     std::to_string(summary.value("total_steps", int64_t{0})) + " steps";
  if (t.first_loss && t.last_loss) {
    std::snprintf(buf, sizeof buf, " | loss %.4f -> %.4f", *t.first_loss, *t.last_loss);
    line += buf;
  }
  if (t.last_eval_loss) {
    std::snprintf(buf, sizeof buf, " | eval loss %.4f", *t.last_eval_loss);
    line += buf;
  }
  if (t.seconds > 0)
    line += " | " + format_count(static_cast<double>(t.tokens)) + " tokens (" +
            format_count(static_cast<double>(t.supervised)) + " supervised) at " +
            format_count(t.tokens / t.seconds) + " tok/s";
  if (summary.contains("mfu")) {
    std::snprintf(buf, sizeof buf, " | MFU %.1f%%", 100 * summary["mfu"].get<double>());
    line += buf;
  }
  if (summary.contains("peak_allocated_bytes")) {
    std::snprintf(buf, sizeof buf, " | peak memory %.1f GiB", common::gib(summary["peak_allocated_bytes"].get<double>()));
    line += buf;
  }
  line += " | " + format_duration(wall_seconds) + " | summary " + summary_path.string();
  log::info(line);
  if (summary.contains("rank_balance")) {
    std::snprintf(buf, sizeof buf, "%.1f%%", 100 * summary["rank_balance"].get<double>());
    log::info(std::string("ranks' balance: ") + buf +
              " (the mean rank's compute over the busiest rank's, from the examples' lengths; a step waits for its "
              "busiest rank, so this bounds the per-GPU rate against one GPU on the same examples; more examples "
              "per step or batching.mode pack balance better)");
  }
  // The data accounting (nothing is dropped silently).
  std::ostringstream data_stats;
  data::print_data_stats(data_stats, stats);
  std::istringstream lines(data_stats.str());
  for (std::string l; std::getline(lines, l);)
    if (!l.empty()) log::info("data: " + l);
}

}  // namespace fptrain::trainer
