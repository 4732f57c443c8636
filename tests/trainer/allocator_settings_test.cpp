// The CUDA allocator's settings: expandable segments in one process on a GPU, unless the user
// configured the allocator; ranks of a group and CPU runs keep it as it is.
#include "trainer/allocator_settings.h"

#include <gtest/gtest.h>

namespace fptrain::trainer {
namespace {

TEST(AllocatorSettings, ExpandableSegmentsInOneProcessUnlessConfigured) {
  EXPECT_TRUE(wants_expandable_segments(true, true, nullptr, nullptr));
  EXPECT_TRUE(wants_expandable_segments(true, true, "", ""));
  EXPECT_FALSE(wants_expandable_segments(true, false, nullptr, nullptr));  // copy engines share memory by IPC
  EXPECT_FALSE(wants_expandable_segments(false, true, nullptr, nullptr));
  EXPECT_FALSE(wants_expandable_segments(true, true, "expandable_segments:False", nullptr));
  EXPECT_FALSE(wants_expandable_segments(true, true, nullptr, "max_split_size_mb:512"));
}

TEST(AllocatorSettings, ACpuRunLeavesTheAllocatorAlone) {
  EXPECT_EQ(choose_allocator_settings(at::Device(at::kCPU), true), "");
}

}  // namespace
}  // namespace fptrain::trainer
