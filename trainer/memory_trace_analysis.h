// What is alive at the peak of a step's device memory, from a plain list of
// allocator events (trainer/memory_trace.h records them on CUDA; the unit tests
// make them up). Replaying the allocations and frees gives the running total of
// live bytes; its maximum is the peak (the first allocation that reaches it), and
// the blocks alive just after that allocation are grouped by what they are: the
// name given to a buffer (a kName event: "weights", "gradients"), else the phase
// tag of the allocation with layer numbers folded ("forward L* attention").
// With an out-of-memory event the same is said of the moment it was raised.
// benchmarks/train/memory_trace_report.py does the same for the transformers
// peer and writes both side by side.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace fptrain::trainer {

struct TraceEvent {
  enum class Kind {
    kAlloc,  // a block at addr of size bytes, allocated in phase `tag`
    kFree,   // the block at addr goes
    kName,   // the block alive at addr now is `tag` (a buffer's name); none alive: ignored
    kOom,    // an allocation of size bytes failed here
  };
  Kind kind = Kind::kAlloc;
  uint64_t addr = 0;
  int64_t size = 0;
  std::string tag;
};

struct LiveBlock {
  uint64_t addr = 0;
  int64_t size = 0;
  std::string tag;   // the phase that allocated it
  std::string name;  // a kName's, else empty
  int64_t event = 0;  // index of its kAlloc
  std::string group() const;
};

struct GroupBytes {
  std::string group;
  int64_t bytes = 0;
  int64_t count = 0;
};

struct TraceAnalysis {
  bool out_of_memory = false;  // at the first kOom rather than at the peak
  int64_t bytes = 0;           // alive at that moment (the peak's total)
  int64_t event = -1;          // the event: the allocation that made the peak, or the kOom
  std::string tag;             // its phase
  int64_t size = 0;            // its bytes (the failed request's with out_of_memory)
  int64_t unmatched_frees = 0;  // frees of blocks the events never allocated
  std::vector<LiveBlock> live;  // alive then, largest first
  // Every allocation of the events by folded tag (bytes allocated, alive or not): each
  // phase's churn, and which phases the events saw at all.
  std::vector<GroupBytes> allocated;
};

// "forward L12 attention" -> "forward L* attention": the layers of one kind together.
std::string fold_layers(const std::string& tag);
// "< 1 MiB", "1-16 MiB", "16-128 MiB", "128 MiB-1 GiB", ">= 1 GiB".
std::string size_class(int64_t bytes);

TraceAnalysis analyse_trace(const std::vector<TraceEvent>& events);

enum class GroupKey { kGroup, kTag, kSizeClass };
std::vector<GroupBytes> group_live(const std::vector<LiveBlock>& live, GroupKey key);  // largest first

// The analysis as JSON ("at", "bytes", "by_group", "by_tag", "by_size_class", "top", and
// "small_blocks": every block under kSmallBlockBytes) and as a short markdown table
// (`title` its heading); `top` blocks listed.
inline constexpr int64_t kSmallBlockBytes = int64_t{16} << 20;
nlohmann::ordered_json trace_json(const TraceAnalysis& a, size_t top = 20);
std::string trace_table(const TraceAnalysis& a, const std::string& title, size_t top = 20);

}  // namespace fptrain::trainer
