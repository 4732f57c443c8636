// Learning rate per optimizer step: linear warmup, then cosine / linear / constant decay.
#pragma once

#include "trainer/config.h"

#include <cstdint>

namespace fptrain::trainer {

// `step` is the 0-based index of the optimizer step about to be taken.
//   step < W:  peak * (step + 1) / W            (reaches peak at the last warmup step)
//   step >= W: p = (step - W + 1) / (total - W)  in (0, 1]
//              cosine:   min + (peak - min) * (1 + cos(pi * p)) / 2
//              linear:   min + (peak - min) * (1 - p)
//              constant: peak
// so the last step (total - 1) runs at exactly min_lr for cosine and linear.
double learning_rate(const ScheduleSection& schedule, double peak_lr, int64_t step, int64_t total_steps);

}  // namespace fptrain::trainer
