// The learning-rate schedule: linear warmup to the peak, then cosine / linear /
// constant, reaching min_lr exactly at the last step.
#include "trainer/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace fptrain::trainer {
namespace {

TEST(TrainSchedule, WarmupThenCosineToMinLr) {
  ScheduleSection s;
  s.warmup_steps = 4;
  s.decay = LrDecay::kCosine;
  s.min_lr = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 0, 14), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 3, 14), 1.0);
  // Steps 4..13 decay over 10 steps; the midpoint is halfway between peak and floor.
  EXPECT_NEAR(learning_rate(s, 1.0, 8, 14), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.5)), 1e-15);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 13, 14), 0.1);
  for (int64_t i = 4; i < 13; ++i) EXPECT_GT(learning_rate(s, 1.0, i, 14), learning_rate(s, 1.0, i + 1, 14));
}

TEST(TrainSchedule, LinearAndConstant) {
  ScheduleSection s;
  s.decay = LrDecay::kLinear;
  EXPECT_DOUBLE_EQ(learning_rate(s, 2.0, 0, 4), 1.5);
  EXPECT_DOUBLE_EQ(learning_rate(s, 2.0, 3, 4), 0.0);
  s.decay = LrDecay::kConstant;
  s.warmup_steps = 2;
  EXPECT_DOUBLE_EQ(learning_rate(s, 2.0, 0, 4), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(s, 2.0, 3, 4), 2.0);
}

}  // namespace
}  // namespace fptrain::trainer
