#include "trainer/step_profiler.h"

#include "common/files.h"
#include "trainer/log/log.h"

#include <ATen/record_function.h>
#include <c10/cuda/CUDAFunctions.h>
#include <kineto/ActivityType.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/version.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>

namespace fptrain::trainer {
namespace fs = std::filesystem;
namespace prof = torch::autograd::profiler;
using Json = nlohmann::ordered_json;

// ---- classification ---------------------------------------------------------

namespace {

constexpr std::array<const char*, kNumStepCategories> kCategoryNames = {
    "gemm",     "attention", "norm", "rope",   "activation", "loss",  "other_elementwise",
    "optimizer", "clipping", "nccl", "memcpy", "memset",     "other"};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool has(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }
bool starts(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

// `words` ("rms_norm") appears in `base` as whole '_'-separated words.
bool has_words(const std::string& base, std::string_view words) {
  return has("_" + base + "_", "_" + std::string(words) + "_");
}

bool one_of(const std::string& base, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), base) != names.end();
}

// What an op is about, in lower snake case without namespace, autograd
// decoration or in-place suffix: "aten::_log_softmax_backward_data" and
// "autograd::engine::evaluate_function: LogSoftmaxBackward0" are "log_softmax",
// "torch::autograd::CppNode<ns::HopperAttention>" is "hopper_attention".
std::string op_base(std::string_view op) {
  std::string s(op);
  if (auto p = s.rfind(": "); p != std::string::npos) s = s.substr(p + 2);
  while (!s.empty() && !(std::isalnum(static_cast<unsigned char>(s.back())) || s.back() == '_')) s.pop_back();
  if (auto p = s.rfind("::"); p != std::string::npos) s = s.substr(p + 2);
  if (auto p = s.rfind('<'); p != std::string::npos) s = s.substr(p + 1);
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    const auto prev = i > 0 ? static_cast<unsigned char>(s[i - 1]) : 0;
    if (std::isupper(c) && i > 0 && (std::islower(prev) || std::isdigit(prev))) out += '_';
    out += static_cast<char>(std::tolower(c));
  }
  while (!out.empty() && out.front() == '_') out.erase(out.begin());
  for (const char* cut : {"backward", "_forward"})
    if (auto p = out.find(cut); p != std::string::npos && p > 0) out.resize(p);
  while (!out.empty() && (out.back() == '_' || std::isdigit(static_cast<unsigned char>(out.back())))) out.pop_back();
  return out;
}

std::optional<StepCategory> by_kernel_name(const std::string& n) {
  if (has(n, "nccl")) return StepCategory::kNccl;
  if (starts(n, "memcpy")) return StepCategory::kMemcpy;
  if (starts(n, "memset")) return StepCategory::kMemset;
  if (has(n, "fptrain::trainer")) {
    if (has(n, "grad_norm")) return StepCategory::kClipping;
    if (has(n, "adamw") || has(n, "accumulate")) return StepCategory::kOptimizer;
  }
  for (const char* a : {"fptrain::attention", "flash_fwd", "flash_bwd", "flash_attn", "fmha", "sdpa", "attention"})
    if (has(n, a)) return StepCategory::kAttention;
  if (has(n, "adam")) return StepCategory::kOptimizer;
  if (has(n, "lpnorm") || has(n, "l2norm")) return StepCategory::kClipping;  // torch's clip_grad_norm_ (foreach norm)
  for (const char* g :
       {"gemm", "cutlass", "nvjet", "xmma", "cublas", "gemv", "splitkreduce", "s16816", "s1688", "hmma"})
    if (has(n, g)) return StepCategory::kGemm;
  return std::nullopt;
}

std::optional<StepCategory> by_op(const std::string& b) {
  if (b.empty()) return std::nullopt;
  if (has(b, "loss") || has(b, "cross_entropy") || has(b, "log_softmax")) return StepCategory::kLoss;
  if (has_words(b, "clip") || has(b, "grad_norm")) return StepCategory::kClipping;
  if (has_words(b, "optimizer") || has(b, "adam")) return StepCategory::kOptimizer;
  if (has(b, "nccl") || has(b, "c10d") || has_words(b, "all_reduce") || has_words(b, "allreduce") ||
      has_words(b, "all_gather") || has_words(b, "allgather") || has_words(b, "reduce_scatter"))
    return StepCategory::kNccl;
  if (has_words(b, "attention") || has_words(b, "attn") || has_words(b, "sdpa") || has_words(b, "softmax"))
    return StepCategory::kAttention;
  if (has(b, "rms_norm") || has(b, "rmsnorm") || has(b, "layer_norm") || has(b, "group_norm") ||
      has(b, "batch_norm") || one_of(b, {"rsqrt", "pow", "mean", "var", "var_mean"}))
    return StepCategory::kNorm;
  if (has_words(b, "rope") || has_words(b, "rotary") || one_of(b, {"neg", "cos", "sin"})) return StepCategory::kRope;
  if (has_words(b, "silu") || has_words(b, "gelu") || has_words(b, "swiglu") ||
      one_of(b, {"relu", "sigmoid", "tanh", "glu", "softplus", "mish"}))
    return StepCategory::kActivation;
  return std::nullopt;
}

bool is_gemm_op(const std::string& b) {
  return one_of(b, {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "addmv", "mv", "dot", "scaled_mm",
                    "addmm_activation"});
}

}  // namespace

const char* category_name(StepCategory c) { return kCategoryNames.at(static_cast<size_t>(c)); }

StepCategory classify_activity(std::string_view name, const std::vector<std::string>& op_chain) {
  const std::string n = lower(name);
  if (auto c = by_kernel_name(n)) return *c;
  for (size_t i = 0; i < op_chain.size(); ++i) {
    const std::string b = op_base(op_chain[i]);
    if (auto c = by_op(b)) return *c;
    if (i == 0 && is_gemm_op(b)) return StepCategory::kGemm;
  }
  if (!op_chain.empty() || has(n, "at::native") || has(n, "elementwise") || starts(n, "aten::"))
    return StepCategory::kOtherElementwise;
  return StepCategory::kOther;
}

int64_t union_length(std::vector<std::pair<int64_t, int64_t>> intervals, int64_t lo, int64_t hi) {
  std::sort(intervals.begin(), intervals.end());
  int64_t total = 0, covered_to = lo;
  for (auto [start, end] : intervals) {
    start = std::max(start, covered_to);
    end = std::min(end, hi);
    if (end > start) {
      total += end - start;
      covered_to = end;
    }
  }
  return total;
}

// ---- what the profiler recorded ------------------------------------------

namespace {

constexpr const char* kStepMarker = "ProfilerStep#";  // torch.profiler's name for a step's range

struct Op {
  std::string name;
  int64_t start = 0, end = 0;
  uint64_t thread = 0, fwd_thread = 0, correlation = 0;
  int64_t seq = -1;
  bool backward = false;
  int parent = -1;
  int64_t self = 0;  // end - start minus the children's time
};

struct DeviceActivity {
  std::string name;
  int64_t start = 0, end = 0;
  uint64_t link = 0;  // the correlation id of the op that launched it (0: none)
};

struct StepSpan {
  int64_t step = 0, start = 0, end = 0;
  uint64_t thread = 0;
};

struct Recorded {
  std::vector<Op> ops;
  std::vector<DeviceActivity> device;
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> runtime;  // CUDA runtime calls
  std::vector<StepSpan> steps;
};

Recorded collect(const prof::ProfilerResult& result, int64_t last_completed) {
  using libkineto::ActivityType;
  Recorded r;
  for (const auto& e : result.events()) {
    const auto type = static_cast<ActivityType>(e.activityType());
    const auto start = static_cast<int64_t>(e.startNs()), end = static_cast<int64_t>(e.endNs());
    if (type == ActivityType::CONCURRENT_KERNEL || type == ActivityType::GPU_MEMCPY ||
        type == ActivityType::GPU_MEMSET) {
      r.device.push_back({e.name(), start, end, e.linkedCorrelationId()});
    } else if (type == ActivityType::CUDA_RUNTIME || type == ActivityType::CUDA_DRIVER) {
      r.runtime.push_back({e.name(), {start, end}});
    } else if ((type == ActivityType::CPU_OP || type == ActivityType::USER_ANNOTATION) && !e.isAsync() &&
               e.deviceType() == c10::DeviceType::CPU && end >= start) {
      const std::string name = e.name();
      if (starts(name, kStepMarker)) {
        const int64_t step = std::atoll(name.c_str() + std::string_view(kStepMarker).size());
        if (step <= last_completed) r.steps.push_back({step, start, end, e.startThreadId()});
        continue;
      }
      Op op;
      op.name = name;
      op.start = start;
      op.end = end;
      op.thread = e.startThreadId();
      op.fwd_thread = e.fwdThreadId();
      op.correlation = e.correlationId();
      op.seq = e.sequenceNr();
      op.backward = e.scope() == static_cast<uint8_t>(at::RecordScope::BACKWARD_FUNCTION);
      r.ops.push_back(std::move(op));
    }
  }
  std::sort(r.steps.begin(), r.steps.end(), [](const StepSpan& a, const StepSpan& b) { return a.start < b.start; });
  return r;
}

// Parents by nesting in time on each thread, and every op's self time.
void link_parents(std::vector<Op>& ops) {
  std::vector<int> order(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const Op &x = ops[a], &y = ops[b];
    if (x.thread != y.thread) return x.thread < y.thread;
    if (x.start != y.start) return x.start < y.start;
    return x.end > y.end;
  });
  std::vector<int> open;
  for (int i : order) {
    Op& op = ops[i];
    while (!open.empty() && (ops[open.back()].thread != op.thread || ops[open.back()].end <= op.start)) open.pop_back();
    if (!open.empty()) op.parent = open.back();
    op.self = op.end - op.start;
    open.push_back(i);
  }
  for (const Op& op : ops)
    if (op.parent >= 0) ops[op.parent].self -= op.end - op.start;
  for (Op& op : ops) op.self = std::max<int64_t>(op.self, 0);
}

// The ops around op i, innermost first; for work of the backward pass, then the
// forward op that made its autograd node and the ops around that one.
class Chains {
 public:
  explicit Chains(const std::vector<Op>& ops) : ops_(ops) {
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.seq < 0 || op.backward || starts(op.name, "autograd::")) continue;
      // The earliest op that saw the node's number: the outermost, whose enclosing ops all share.
      const auto [it, added] = forward_.emplace(std::make_pair(op.thread, op.seq), static_cast<int>(i));
      if (!added && ops[it->second].start > op.start) it->second = static_cast<int>(i);
    }
  }
  std::vector<std::string> of(int i) const {
    std::vector<std::string> chain;
    int backward = -1;
    for (int j = i; j >= 0; j = ops_[j].parent) {
      chain.push_back(ops_[j].name);
      if (backward < 0 && ops_[j].backward && ops_[j].seq >= 0) backward = j;
    }
    if (backward >= 0) {
      const Op& b = ops_[backward];
      auto f = forward_.find({b.fwd_thread ? b.fwd_thread : b.thread, b.seq});
      if (f == forward_.end()) f = forward_.find({b.thread, b.seq});
      if (f != forward_.end())
        for (int j = f->second; j >= 0; j = ops_[j].parent) chain.push_back(ops_[j].name);
    }
    return chain;
  }

 private:
  const std::vector<Op>& ops_;
  std::map<std::pair<uint64_t, int64_t>, int> forward_;
};

// One classified piece of work: a GPU activity, or a CPU op's self time.
struct Item {
  std::string name;
  StepCategory category;
  int64_t start, end, duration;
  int step;        // index into the window's steps
  std::string op;  // the op that launched it, and its autograd node: "aten::mul < MulBackward0"
};

// "aten::mul < MulBackward0": an op, and the autograd node it runs in, if any.
std::string op_label(const std::vector<Op>& ops, int i) {
  if (i < 0) return "(no op)";
  std::string label = ops[i].name;
  for (int j = ops[i].parent; j >= 0; j = ops[j].parent)
    if (ops[j].backward) return label + " < " + ops[j].name;
  return label;
}

// The step of the window a time belongs to (the last that began before it).
int step_at(const std::vector<StepSpan>& steps, int64_t t) {
  const auto after = std::upper_bound(steps.begin(), steps.end(), t,
                                      [](int64_t v, const StepSpan& s) { return v < s.start; });
  return std::max<int>(0, static_cast<int>(after - steps.begin()) - 1);
}

double ms(double ns) { return ns / 1e6; }
double round3(double v) { return std::round(v * 1000.0) / 1000.0; }

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

// The report: GPU activity (or the CPU ops' self time) of the window's steps.
Json analyze(const Recorded& rec, bool gpu, const DeviceInfo& device, int64_t warmup, std::string note) {
  std::vector<Op> ops = rec.ops;
  link_parents(ops);
  const Chains chains(ops);
  const auto& steps = rec.steps;
  const int64_t n = static_cast<int64_t>(steps.size());
  const int64_t lo = steps.front().start;
  int64_t hi = steps.back().end;

  std::vector<Item> items;
  if (gpu) {
    std::unordered_map<uint64_t, int> by_correlation;
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].correlation) by_correlation.emplace(ops[i].correlation, static_cast<int>(i));
    for (const auto& a : rec.device) {
      if (a.end < lo) continue;
      const auto op = a.link ? by_correlation.find(a.link) : by_correlation.end();
      const bool linked = op != by_correlation.end();
      if (linked && ops[op->second].start >= steps.back().end) continue;  // launched by a step left unfinished
      const std::vector<std::string> chain = linked ? chains.of(op->second) : std::vector<std::string>{};
      items.push_back({a.name, classify_activity(a.name, chain), a.start, a.end, a.end - a.start,
                       step_at(steps, linked ? ops[op->second].start : a.start),
                       op_label(ops, linked ? op->second : -1)});
      hi = std::max(hi, a.end);  // the window's last step ends when the GPU has finished it
    }
  } else {
    const uint64_t thread = steps.front().thread;
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.thread != thread || op.start < lo || op.start >= hi) continue;
      items.push_back({op.name, classify_activity(op.name, chains.of(static_cast<int>(i))), op.start, op.end, op.self,
                       step_at(steps, op.start), op_label(ops, static_cast<int>(i))});
    }
  }
  const double wall = static_cast<double>(hi - lo);
  std::vector<std::pair<int64_t, int64_t>> intervals;
  for (const auto& it : items) intervals.emplace_back(it.start, it.end);
  const double busy = static_cast<double>(union_length(std::move(intervals), lo, hi));

  std::array<double, kNumStepCategories> cat_ns{};
  std::array<int64_t, kNumStepCategories> cat_count{};
  struct Kernel {
    StepCategory category;
    double ns = 0;
    int64_t count = 0;
  };
  std::map<std::string, Kernel> kernels, elementwise_ops;
  std::vector<double> step_ns(n, 0.0);
  std::vector<int64_t> step_count(n, 0);
  for (const auto& it : items) {
    const auto c = static_cast<size_t>(it.category);
    cat_ns[c] += static_cast<double>(it.duration);
    ++cat_count[c];
    Kernel& k = kernels.try_emplace(it.name, Kernel{it.category}).first->second;
    k.ns += static_cast<double>(it.duration);
    ++k.count;
    if (it.category == StepCategory::kOtherElementwise) {
      Kernel& e = elementwise_ops.try_emplace(it.op, Kernel{it.category}).first->second;
      e.ns += static_cast<double>(it.duration);
      ++e.count;
    }
    step_ns[it.step] += static_cast<double>(it.duration);
    ++step_count[it.step];
  }
  double sync_ns = 0, api_ns = 0;
  int64_t syncs = 0;
  for (const auto& [name, t] : rec.runtime) {
    if (t.first < lo || t.first >= hi) continue;
    api_ns += static_cast<double>(t.second - t.first);
    // A copy to pageable host memory (reading a loss) waits for the GPU inside cudaMemcpy*.
    if (has(name, "Synchronize") || starts(name, "cudaMemcpy")) {
      sync_ns += static_cast<double>(t.second - t.first);
      ++syncs;
    }
  }

  const double per = static_cast<double>(n);
  auto pct = [&](double ns) { return wall > 0 ? round3(100.0 * ns / wall) : 0.0; };
  Json j;
  j["device"] = device.name;
  j["date"] = utc_now();
  j["torch"] = TORCH_VERSION;
  j["mode"] = gpu ? "gpu" : "cpu";
  j["activity"] = gpu ? "GPU kernels, memcpy and memset (CUPTI through Kineto)"
                      : "CPU ops, self time on the training thread (Kineto)";
  if (!note.empty()) j["note"] = note;
  j["warmup_steps"] = warmup;
  j["profiled_steps"] = n;
  j["first_step"] = steps.front().step;
  j["last_step"] = steps.back().step;
  j["per_step"] = {{"wall_ms", round3(ms(wall) / per)},
                   {"busy_ms", round3(ms(busy) / per)},
                   {"idle_ms", round3(ms(wall - busy) / per)},
                   {"busy_percent", pct(busy)},
                   {"idle_percent", pct(wall - busy)},
                   {"kernels", round3(static_cast<double>(items.size()) / per)},
                   {"host_sync_ms", round3(ms(sync_ns) / per)},
                   {"host_syncs", round3(static_cast<double>(syncs) / per)},
                   {"cuda_api_ms", round3(ms(api_ns) / per)}};
  Json cats = Json::object();
  for (size_t c = 0; c < kNumStepCategories; ++c)
    cats[kCategoryNames[c]] = {{"ms", round3(ms(cat_ns[c]) / per)},
                               {"percent", pct(cat_ns[c])},
                               {"count", round3(static_cast<double>(cat_count[c]) / per)}};
  j["categories"] = cats;
  auto costliest = [&](const std::map<std::string, Kernel>& all, size_t count) {
    std::vector<std::pair<std::string, Kernel>> top(all.begin(), all.end());
    std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
    if (top.size() > count) top.resize(count);
    Json out = Json::array();
    for (const auto& [name, k] : top)
      out.push_back({{"name", name},
                     {"category", kCategoryNames[static_cast<size_t>(k.category)]},
                     {"ms", round3(ms(k.ns) / per)},
                     {"percent", pct(k.ns)},
                     {"count", round3(static_cast<double>(k.count) / per)},
                     {"mean_us", round3(k.ns / 1e3 / static_cast<double>(k.count))}});
    return out;
  };
  j["top_kernels"] = costliest(kernels, 15);
  // What other_elementwise is made of: the ops that launched it (and their autograd nodes).
  j["other_elementwise_by_op"] = costliest(elementwise_ops, 10);
  Json per_step = Json::array();
  for (int64_t s = 0; s < n; ++s)
    per_step.push_back({{"step", steps[s].step},
                        {"wall_ms", round3(ms(static_cast<double>(steps[s].end - steps[s].start)))},
                        {"kernels", step_count[s]},
                        {gpu ? "gpu_ms" : "op_ms", round3(ms(step_ns[s]))}});
  j["steps"] = per_step;
  return j;
}

std::string fixed(double v, int digits = 1) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Kernel names run to hundreds of characters of template arguments.
std::string short_name(const std::string& name) {
  std::string s = name.size() > 110 ? name.substr(0, 107) + "..." : name;
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return "`" + out + "`";
}

std::string markdown(const Json& j) {
  const bool gpu = j["mode"] == "gpu";
  const std::string what = gpu ? "GPU" : "CPU ops";
  const std::string unit = gpu ? "kernels" : "ops";
  const Json& p = j["per_step"];
  std::ostringstream md;
  md << "# Step profile\n\n"
     << "Device " << j["device"].get<std::string>() << ", " << j["date"].get<std::string>() << ", LibTorch "
     << j["torch"].get<std::string>() << ". Steps " << j["first_step"].get<int64_t>() << "-"
     << j["last_step"].get<int64_t>() << " (" << j["profiled_steps"].get<int64_t>() << " after "
     << j["warmup_steps"].get<int64_t>() << " warm-up steps); " << j["activity"].get<std::string>()
     << ". Figures are per step (the window's totals / its steps).\n\n";
  if (j.contains("note")) md << "**Note:** " << j["note"].get<std::string>() << "\n\n";
  md << "| per step | ms | % of wall |\n| --- | ---: | ---: |\n"
     << "| wall time | " << fixed(p["wall_ms"]) << " | 100.0 |\n"
     << "| " << what << " busy (union of its activity) | " << fixed(p["busy_ms"]) << " | " << fixed(p["busy_percent"])
     << " |\n"
     << "| " << what << " idle (host gaps and synchronizations) | " << fixed(p["idle_ms"]) << " | "
     << fixed(p["idle_percent"]) << " |\n";
  if (gpu)
    md << "| host time waiting in cuda*Synchronize and cudaMemcpy* (" << fixed(p["host_syncs"]) << " calls) | "
       << fixed(p["host_sync_ms"], 2) << " | |\n"
       << "| host time in CUDA runtime calls (kernel launches; the profiler's tracing inflates them) | "
       << fixed(p["cuda_api_ms"], 2) << " | |\n";
  md << "| " << unit << " | " << fixed(p["kernels"]) << " | |\n\n";
  md << "| category | ms / step | % of wall | " << unit << " / step |\n| --- | ---: | ---: | ---: |\n";
  for (const auto& [name, c] : j["categories"].items())
    md << "| " << name << " | " << fixed(c["ms"], 2) << " | " << fixed(c["percent"]) << " | " << fixed(c["count"])
       << " |\n";
  md << "\nCategories can overlap in time (NCCL beside compute), so their sum may exceed the busy time.\n\n"
     << "## Top " << j["top_kernels"].size() << " " << unit << " by total time\n\n"
     << "| " << (gpu ? "kernel" : "op") << " | category | ms / step | % of wall | calls / step | mean µs |\n"
     << "| --- | --- | ---: | ---: | ---: | ---: |\n";
  for (const auto& k : j["top_kernels"])
    md << "| " << short_name(k["name"].get<std::string>()) << " | " << k["category"].get<std::string>() << " | "
       << fixed(k["ms"], 2) << " | " << fixed(k["percent"]) << " | " << fixed(k["count"]) << " | "
       << fixed(k["mean_us"]) << " |\n";
  if (gpu && !j["other_elementwise_by_op"].empty()) {
    md << "\n## other_elementwise by the op that launched it\n\n"
       << "| op (< autograd node) | ms / step | % of wall | kernels / step |\n| --- | ---: | ---: | ---: |\n";
    for (const auto& k : j["other_elementwise_by_op"])
      md << "| " << short_name(k["name"].get<std::string>()) << " | " << fixed(k["ms"], 2) << " | "
         << fixed(k["percent"]) << " | " << fixed(k["count"]) << " |\n";
  }
  md << "\n## Steps\n\n"
     << (gpu ? "The host runs ahead of the GPU: a step's host time and the GPU time of the kernels it launched differ "
               "step by step; the window's totals above are what add up.\n\n"
             : "")
     << "| step | wall ms (host) | " << unit << " | " << (gpu ? "GPU" : "op") << " ms |\n"
     << "| ---: | ---: | ---: | ---: |\n";
  for (const auto& s : j["steps"])
    md << "| " << s["step"].get<int64_t>() << " | " << fixed(s["wall_ms"]) << " | " << s["kernels"].get<int64_t>()
       << " | " << fixed(s[gpu ? "gpu_ms" : "op_ms"]) << " |\n";
  return md.str();
}

std::string summary_line(const Json& j, const fs::path& md_path) {
  const bool gpu = j["mode"] == "gpu";
  const Json& p = j["per_step"];
  std::vector<std::pair<double, std::string>> cats;
  for (const auto& [name, c] : j["categories"].items()) cats.emplace_back(c["percent"].get<double>(), name);
  std::sort(cats.rbegin(), cats.rend());
  std::string top;
  for (size_t i = 0; i < std::min<size_t>(5, cats.size()) && cats[i].first > 0; ++i)
    top += (i ? ", " : "") + cats[i].second + " " + fixed(cats[i].first) + "%";
  return "step profile, steps " + std::to_string(j["first_step"].get<int64_t>()) + "-" +
         std::to_string(j["last_step"].get<int64_t>()) + (gpu ? " (GPU)" : " (CPU ops)") + ": " +
         fixed(p["wall_ms"]) + " ms/step, busy " + fixed(p["busy_percent"]) + "%, idle " + fixed(p["idle_ms"]) +
         " ms (" + fixed(p["idle_percent"]) + "%: host gaps and syncs), " + fixed(p["kernels"], 0) +
         (gpu ? " kernels" : " ops") + "/step | " + top + " | " + md_path.string();
}

std::pair<prof::ProfilerConfig, std::set<prof::ActivityType>> profiler_setup(bool gpu) {
  std::set<prof::ActivityType> activities = {prof::ActivityType::CPU};
  if (gpu) activities.insert(prof::ActivityType::CUDA);
  return {prof::ProfilerConfig(prof::ProfilerState::KINETO), activities};
}

}  // namespace

// The open range of one step: a RecordFunction, recorded like any op.
struct StepMarker {
  at::RecordFunction fn{at::RecordScope::USER_SCOPE};
  explicit StepMarker(const std::string& name) {
    if (fn.isActive()) fn.before(std::string_view(name));
  }
};

StepProfiler::StepProfiler(int64_t steps, int64_t warmup, fs::path output_dir, DeviceInfo device)
    : steps_(steps), warmup_(warmup), output_dir_(std::move(output_dir)), device_(std::move(device)) {
  if (steps_ <= 0) state_ = State::kDone;
}

StepProfiler::~StepProfiler() {
  if (state_ != State::kRecording) return;
  marker_.reset();
  try {
    prof::disableProfiler();
  } catch (...) {
  }
}

void StepProfiler::begin_step(int64_t completed_steps) {
  if (state_ == State::kDone) return;
  if (first_step_ < 0) first_step_ = completed_steps;
  last_seen_ = completed_steps;
  const int64_t k = completed_steps - first_step_;  // steps this process has done
  try {
    if (state_ == State::kWaiting && k + 1 >= warmup_) {  // during the last warm-up step: CUPTI's set-up
      // Profiling CPU ops, Kineto's probe for GPUs would log an error where there is no driver.
      if (!device_.device.is_cuda()) ::setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
      const auto [config, activities] = profiler_setup(device_.device.is_cuda());
      prof::prepareProfiler(config, activities);
      state_ = State::kPrepared;
    }
    if (state_ == State::kPrepared && k >= warmup_) start_window();
    if (state_ == State::kRecording && !marker_) {
      marker_name_ = kStepMarker + std::to_string(completed_steps + 1);
      marker_ = std::make_unique<StepMarker>(marker_name_);
    }
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

void StepProfiler::start_window() {
  if (device_.device.is_cuda()) c10::cuda::device_synchronize();  // the window starts with an idle GPU
  const auto [config, activities] = profiler_setup(device_.device.is_cuda());
  prof::enableProfiler(config, activities);
  state_ = State::kRecording;
  log::info("step profile: recording " + std::to_string(steps_) + " step(s) after " + std::to_string(warmup_) +
            " warm-up step(s)");
}

void StepProfiler::end_step(int64_t completed_steps) {
  last_seen_ = completed_steps;
  if (state_ != State::kRecording || !marker_) return;
  marker_.reset();
  ++recorded_;
  last_completed_ = completed_steps;
  if (recorded_ >= steps_) stop_window(/*complete=*/true);
}

void StepProfiler::finish() {
  if (state_ == State::kRecording) {
    marker_.reset();
    stop_window(/*complete=*/false);
  } else if (state_ != State::kDone) {
    log::warn("step profile: none taken: this process ran " +
              std::to_string(first_step_ < 0 ? 0 : last_seen_ - first_step_) +
              " step(s), fewer than logging.profile_warmup (" + std::to_string(warmup_) +
              ") + 1; lower logging.profile_warmup or train longer");
    state_ = State::kDone;
  }
}

void StepProfiler::stop_window(bool complete) {
  std::unique_ptr<prof::ProfilerResult> result;
  try {
    if (device_.device.is_cuda()) c10::cuda::device_synchronize();  // the window's GPU work, all of it
    result = prof::disableProfiler();
  } catch (const std::exception& e) {
    fail(e.what());
    return;
  }
  state_ = State::kDone;
  try {
    Recorded rec = collect(*result, last_completed_);
    if (rec.steps.empty()) {
      log::warn("step profile: no step completed inside the window; nothing to report");
      return;
    }
    std::string note;
    if (!complete)
      note = "the run ended after " + std::to_string(rec.steps.size()) + " of the " + std::to_string(steps_) +
             " steps asked for (logging.profile_steps)";
    bool gpu = device_.device.is_cuda();
    if (gpu && rec.device.empty()) {
      gpu = false;
      note += std::string(note.empty() ? "" : "; ") +
              "no GPU activity was recorded (this LibTorch has no Kineto/CUPTI, or libcupti could not be loaded): "
              "the figures are the CPU ops' self time";
    }
    const Json j = analyze(rec, gpu, device_, warmup_, note);
    common::write_file_atomically(output_dir_ / "profile.json", j.dump(2) + "\n");
    common::write_file_atomically(output_dir_ / "profile.md", markdown(j));
    log::info(summary_line(j, output_dir_ / "profile.md"));
    if (!note.empty()) log::warn("step profile: " + note);
  } catch (const std::exception& e) {
    log::warn(std::string("step profile: the report failed: ") + e.what());
  }
}

void StepProfiler::fail(const std::string& what) {
  marker_.reset();
  if (state_ == State::kRecording) {
    try {
      prof::disableProfiler();
    } catch (...) {
    }
  }
  state_ = State::kDone;
  log::warn("step profile: the profiler failed (" + what + "); the run goes on without it");
}

}  // namespace fptrain::trainer
