#include "trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace fptrain::trainer {

double learning_rate(const ScheduleSection& schedule, double peak_lr, int64_t step, int64_t total_steps) {
  const int64_t warmup = schedule.warmup_steps;
  if (step < warmup) return peak_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (schedule.decay == LrDecay::kConstant) return peak_lr;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup);
  const double p = std::min(1.0, static_cast<double>(step - warmup + 1) / static_cast<double>(decay_steps));
  const double span = peak_lr - schedule.min_lr;
  if (schedule.decay == LrDecay::kLinear) return schedule.min_lr + span * (1.0 - p);
  return schedule.min_lr + span * 0.5 * (1.0 + std::cos(M_PI * p));
}

}  // namespace fptrain::trainer
