// `fptrain train`: the training loop, top-down.
//
//   set up    device, dtype, attention backend; model + tokenizer (from the
//             resumed checkpoint if any); data stream (at its saved cursor);
//             AdamW (with its saved state)
//   each step take the step's micro-batches; the loss denominator is the
//             step's supervised-token count, known before any compute (and the
//             same on every data-parallel rank); forward + backward each
//             micro-batch with loss_sum / denominator; clip by global norm;
//             AdamW at the scheduled learning rate
//   around it metrics every log interval, evaluation, checkpoints every
//             interval, and on SIGINT/SIGTERM: finish the step, save, return
#pragma once

#include "trainer/config.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>

namespace fptrain::trainer {

struct TrainOutcome {
  int64_t steps_completed = 0;  // optimizer steps done, including those before a resume
  int64_t total_steps = 0;
  bool interrupted = false;     // stopped by a signal (a checkpoint was saved)
  int signal = 0;
  std::optional<std::filesystem::path> last_checkpoint;
  nlohmann::json summary;       // also written to <output_dir>/summary.json
};

// Runs (or resumes) the training the configuration describes. Throws on bad
// configuration or data with a message naming the key, file or line.
TrainOutcome train(const TrainConfig& config);

}  // namespace fptrain::trainer
