#include "trainer/memory_trace.h"

#include "common/byte_units.h"
#include "common/files.h"
#include "trainer/log/log.h"
#include "trainer/memory_phase.h"
#include "trainer/memory_trace_analysis.h"
#include "trainer/memory_trace_hooks.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

namespace fptrain::trainer {
namespace fs = std::filesystem;
namespace alloc = c10::cuda::CUDACachingAllocator;
using Entry = c10::CachingDeviceAllocator::TraceEntry;

namespace {

// Enough for a 7B step (~10^5 events) many times over; ~100 bytes each.
constexpr size_t kMaxEntries = 20'000'000;
constexpr const char* kBefore = "before the step";

using Names = std::vector<std::pair<uint64_t, std::string>>;

// What the context recorder attaches to an allocation: the phase, and for a naming
// marker the names it carries.
struct PhaseContext : c10::GatheredContext {
  std::string tag;
  std::shared_ptr<const Names> names;
};

thread_local std::shared_ptr<const Names> t_names;  // the marker being allocated

std::shared_ptr<c10::GatheredContext> record_phase() {
  auto c = std::make_shared<PhaseContext>();
  c->tag = memory_phase::tag();
  c->names = t_names;
  return c;
}

c10::DeviceIndex index_of(const at::Device& d) { return d.has_index() ? d.index() : c10::cuda::current_device(); }

int64_t stat(const c10::CachingDeviceAllocator::StatArray& s, bool peak) {
  const auto& a = s[static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)];
  return peak ? a.peak : a.current;
}

}  // namespace

// The blocks alive when recording began, and the allocator's peaks until then.
struct TraceStart {
  std::vector<TraceEvent> blocks;
  int64_t run_allocated_peak = 0, run_requested_peak = 0;
};

namespace {

std::unique_ptr<TraceStart> take_start(c10::DeviceIndex dev) {
  auto start = std::make_unique<TraceStart>();
  const auto stats = alloc::getDeviceStats(dev);
  start->run_allocated_peak = stat(stats.allocated_bytes, true);
  start->run_requested_peak = stat(stats.requested_bytes, true);
  for (const auto& seg : alloc::snapshot({0, 0}, /*include_traces=*/false).segments) {
    if (seg.device != dev) continue;
    uint64_t addr = seg.address;
    for (const auto& b : seg.blocks) {
      if (b.allocated) start->blocks.push_back({TraceEvent::Kind::kAlloc, addr, static_cast<int64_t>(b.requested_size), kBefore});
      addr += b.size;
    }
  }
  return start;
}

std::string tag_of(const Entry& e) {
  const auto* c = dynamic_cast<const PhaseContext*>(e.context_.get());
  return c ? (c->names ? "trace marker" : c->tag) : "untagged";
}

// The recorded history as analysis events, after the blocks alive at the start.
std::vector<TraceEvent> events_of(const TraceStart& start, const std::vector<Entry>& trace) {
  std::vector<TraceEvent> events = start.blocks;
  for (const Entry& e : trace) {
    if (e.action_ == Entry::ALLOC) {
      events.push_back({TraceEvent::Kind::kAlloc, e.addr_, static_cast<int64_t>(e.size_), tag_of(e)});
      const auto* c = dynamic_cast<const PhaseContext*>(e.context_.get());
      if (c && c->names)
        for (const auto& [addr, name] : *c->names) events.push_back({TraceEvent::Kind::kName, addr, 0, name});
    } else if (e.action_ == Entry::FREE_REQUESTED) {
      events.push_back({TraceEvent::Kind::kFree, e.addr_, 0, ""});
    } else if (e.action_ == Entry::OOM) {
      events.push_back({TraceEvent::Kind::kOom, 0, static_cast<int64_t>(e.size_), tag_of(e)});
    }
  }
  return events;
}

}  // namespace

MemoryTrace::MemoryTrace(int64_t step, fs::path output_dir, at::Device device)
    : step_(step), output_dir_(std::move(output_dir)), device_(device) {
  if (step_ <= 0) state_ = State::kDone;
  if (step_ > 0 && !device_.is_cuda()) {
    log::warn("logging.memory_trace_step: the allocator's history is CUDA's; no trace on " + device_.str());
    state_ = State::kDone;
  }
}

MemoryTrace::~MemoryTrace() {
  if (state_ != State::kRecording) return;
  labels_.reset();
  try {
    alloc::recordHistory(false, nullptr, 0, c10::CachingDeviceAllocator::RecordContext::NEVER, true, {});
  } catch (...) {
  }
}

void MemoryTrace::begin_step(int64_t completed_steps, models::CausalLM& model) {
  if (state_ != State::kWaiting || completed_steps + 1 != step_) return;
  const c10::DeviceIndex dev = index_of(device_);
  start_ = take_start(dev);
  alloc::resetPeakStats(dev);  // the counters' peak becomes the step's own
  alloc::recordHistory(true, record_phase, kMaxEntries, c10::CachingDeviceAllocator::RecordContext::ALLOC,
                       /*clearHistory=*/true, {});
  labels_ = std::make_unique<ModelPhaseLabels>(model);
  memory_phase::set_stage("step");
  state_ = State::kRecording;
  log::info("memory trace: recording the allocator's history through step " + std::to_string(step_));
}

void MemoryTrace::label_loss(const at::Tensor& loss) const {
  if (recording()) label_backward_at(loss, "backward head/loss");
}

void MemoryTrace::name_buffers(const std::vector<std::pair<std::string, at::Tensor>>& buffers) const {
  if (!recording()) return;
  auto names = std::make_shared<Names>();
  for (const auto& [name, t] : buffers)
    if (t.defined() && t.is_cuda()) names->emplace_back(reinterpret_cast<uint64_t>(t.storage().data()), name);
  // A one-byte marker carries the names into the history, in order with the allocations.
  t_names = std::move(names);
  at::empty({1}, at::TensorOptions().dtype(at::kByte).device(device_));
  t_names.reset();
}

void MemoryTrace::end_step() {
  if (recording()) stop_and_write("memory_trace");
}

std::string MemoryTrace::out_of_memory() {
  if (!recording()) return "";
  stop_and_write("memory_trace_oom");
  return " What was alive when it was raised: " + (output_dir_ / "memory_trace_oom.md").string() + ".";
}

void MemoryTrace::stop_and_write(const std::string& stem) {
  labels_.reset();
  memory_phase::set_stage("");
  state_ = State::kDone;
  const c10::DeviceIndex dev = index_of(device_);
  try {
    const alloc::SnapshotInfo snap = alloc::snapshot();
    alloc::recordHistory(false, nullptr, 0, c10::CachingDeviceAllocator::RecordContext::NEVER, true, {});
    const auto& trace = static_cast<size_t>(dev) < snap.device_traces.size() ? snap.device_traces[dev] : std::vector<Entry>{};
    const TraceAnalysis a = analyse_trace(events_of(*start_, trace));
    const auto stats = alloc::getDeviceStats(dev);
    nlohmann::ordered_json j;
    j["side"] = "fptrain";
    j["step"] = step_;
    j["sizes"] = "requested";
    j["history_entries"] = trace.size();
    j["history_full"] = trace.size() >= kMaxEntries;  // the oldest entries were overwritten
    j["allocator"] = {{"requested_peak_bytes", stat(stats.requested_bytes, true)},
                      {"allocated_peak_bytes", stat(stats.allocated_bytes, true)},
                      {"run_allocated_peak_before_bytes", start_->run_allocated_peak},
                      {"run_requested_peak_before_bytes", start_->run_requested_peak}};
    j.update(trace_json(a));
    common::write_file_atomically(output_dir_ / (stem + ".json"), j.dump(2) + "\n");
    common::write_file_atomically(output_dir_ / (stem + ".md"),
                                  trace_table(a, "fptrain, step " + std::to_string(step_)));
    log::info("memory trace of step " + std::to_string(step_) + ": " + common::gib_text(a.bytes) + " alive at the " +
              (a.out_of_memory ? "out-of-memory error" : "peak") + " (" + a.tag + "); " +
              (output_dir_ / (stem + ".md")).string());
  } catch (const std::exception& e) {
    log::warn(std::string("memory trace: writing it failed: ") + e.what());
  }
}

}  // namespace fptrain::trainer
