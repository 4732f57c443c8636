// The memory trace's analysis on made-up allocator events: the peak is the first
// allocation reaching the largest total, the blocks alive then are grouped by
// name or folded phase tag, names reach blocks allocated before they were given,
// and an out-of-memory event turns the report to the moment it was raised. The
// phase labels are per thread and come back at the end of their scopes.
#include "trainer/memory_phase.h"
#include "trainer/memory_trace_analysis.h"

#include <gtest/gtest.h>

#include <thread>

namespace fptrain::trainer {
namespace {

using K = TraceEvent::Kind;

TraceEvent alloc(uint64_t addr, int64_t size, std::string tag) { return {K::kAlloc, addr, size, std::move(tag)}; }
TraceEvent free_at(uint64_t addr) { return {K::kFree, addr, 0, ""}; }

int64_t bytes_of(const std::vector<GroupBytes>& groups, const std::string& name) {
  for (const GroupBytes& g : groups)
    if (g.group == name) return g.bytes;
  return -1;
}

TEST(MemoryTraceAnalysis, PeakIsTheFirstAllocationReachingTheLargestTotal) {
  const std::vector<TraceEvent> events = {
      alloc(1, 100, "before the step"),    alloc(2, 50, "forward L0 attention"), alloc(3, 70, "forward L1 attention"),
      alloc(4, 30, "forward L1 mlp"),      free_at(2),                           alloc(5, 50, "backward L1 mlp"),
      free_at(5),                          alloc(6, 10, "optimizer")};
  const TraceAnalysis a = analyse_trace(events);
  EXPECT_FALSE(a.out_of_memory);
  EXPECT_EQ(a.bytes, 250);
  EXPECT_EQ(a.event, 3);  // the later equal total (event 5) is not the first
  EXPECT_EQ(a.tag, "forward L1 mlp");
  EXPECT_EQ(a.size, 30);
  ASSERT_EQ(a.live.size(), 4u);
  EXPECT_EQ(a.live.front().size, 100);  // largest first
  const auto groups = group_live(a.live, GroupKey::kGroup);
  EXPECT_EQ(bytes_of(groups, "forward L* attention"), 120);
  EXPECT_EQ(bytes_of(groups, "forward L* mlp"), 30);
  EXPECT_EQ(bytes_of(group_live(a.live, GroupKey::kTag), "forward L1 attention"), 70);
  EXPECT_EQ(bytes_of(a.allocated, "backward L* mlp"), 50);  // freed before the peak, allocated all the same
  EXPECT_EQ(bytes_of(a.allocated, "optimizer"), 10);
}

TEST(MemoryTraceAnalysis, NamesReachTheBlockAliveWhenGivenEvenBeforeThey) {
  // Block 7 is a gradient bucket allocated in the backward, named after it; the same
  // address held an activation before, which keeps its phase.
  const std::vector<TraceEvent> events = {
      alloc(7, 40, "forward L0 mlp"), free_at(7),           alloc(7, 80, "backward L1 mlp"),
      alloc(8, 5, "backward L0"),     {K::kName, 7, 0, "gradients"}, {K::kName, 9, 0, "nothing alive there"},
      free_at(8)};
  const TraceAnalysis a = analyse_trace(events);
  EXPECT_EQ(a.bytes, 85);
  const auto groups = group_live(a.live, GroupKey::kGroup);
  EXPECT_EQ(bytes_of(groups, "gradients"), 80);
  EXPECT_EQ(bytes_of(groups, "backward L* mlp"), -1);
  EXPECT_EQ(bytes_of(groups, "backward L*"), 5);
}

TEST(MemoryTraceAnalysis, OutOfMemorySaysWhatWasAliveWhenItWasRaised) {
  const std::vector<TraceEvent> events = {alloc(1, 100, "forward L0 attention"), free_at(1),
                                          alloc(2, 60, "forward L1 mlp"),
                                          {K::kOom, 0, 500, "forward L1 mlp"},
                                          free_at(2)};
  const TraceAnalysis a = analyse_trace(events);
  EXPECT_TRUE(a.out_of_memory);
  EXPECT_EQ(a.bytes, 60);
  EXPECT_EQ(a.size, 500);
  const nlohmann::ordered_json j = trace_json(a);
  EXPECT_EQ(j["at"], "out of memory");
  EXPECT_EQ(j["failed_request_bytes"], 500);
  EXPECT_NE(trace_table(a, "t").find("failed"), std::string::npos);
}

TEST(MemoryTraceAnalysis, FreesOfUnknownBlocksAreCountedNotSubtracted) {
  const TraceAnalysis a = analyse_trace({free_at(3), alloc(1, 10, "x"), free_at(4)});
  EXPECT_EQ(a.bytes, 10);
  EXPECT_EQ(a.unmatched_frees, 1);  // the one before the peak
  EXPECT_EQ(analyse_trace({}).event, -1);
}

TEST(MemoryTraceAnalysis, JsonAndTableCarryGroupsSizeClassesAndTopBlocks) {
  std::vector<TraceEvent> events;
  for (int i = 0; i < 30; ++i) events.push_back(alloc(static_cast<uint64_t>(i + 1), (i + 1) << 20, "forward L" + std::to_string(i) + " mlp"));
  const TraceAnalysis a = analyse_trace(events);
  const nlohmann::ordered_json j = trace_json(a);
  EXPECT_EQ(j["top"].size(), 20u);
  EXPECT_EQ(j["top"][0]["bytes"], int64_t{30} << 20);
  ASSERT_EQ(j["small_blocks"].size(), 15u);  // 1..15 MiB, largest first
  EXPECT_EQ(j["small_blocks"][0]["bytes"], int64_t{15} << 20);
  EXPECT_EQ(j["by_group"].size(), 1u);
  EXPECT_EQ(j["by_size_class"][0]["group"], "16-128 MiB");
  const std::string md = trace_table(a, "fptrain, step 3");
  EXPECT_NE(md.find("| forward L* mlp |"), std::string::npos);
  EXPECT_EQ(fold_layers("recompute L12 attention"), "recompute L* attention");
  EXPECT_EQ(fold_layers("Liger L2x"), "Liger L*x");
  EXPECT_EQ(size_class(2048), "< 1 MiB");
  EXPECT_EQ(size_class(int64_t{2} << 30), ">= 1 GiB");
}

TEST(MemoryPhase, ScopesNestPerThread) {
  namespace mp = memory_phase;
  EXPECT_EQ(mp::tag(), "other");
  {
    mp::StageScope s("forward L3");
    mp::OpScope o("attention");
    EXPECT_EQ(mp::tag(), "forward L3 attention");
    std::thread([] {
      EXPECT_EQ(mp::tag(), "other");  // another thread has its own labels
      mp::set_stage("backward L3");
      EXPECT_TRUE(mp::in_backward());
    }).join();
    {
      mp::StageScope inner("recompute L3");
      EXPECT_EQ(mp::tag(), "recompute L3");
    }
    EXPECT_EQ(mp::tag(), "forward L3 attention");
    EXPECT_FALSE(mp::in_backward());
  }
  EXPECT_EQ(mp::tag(), "other");
}

}  // namespace
}  // namespace fptrain::trainer
