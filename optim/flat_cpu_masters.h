// What the CPU references of the AdamW steps (flat_adamw.cpp, flat_adamw8bit.cpp) share about
// master weights: where an update's fp32 weight lives and the model's copy of a master.
#pragma once

#include <c10/util/BFloat16.h>

#include <type_traits>

#include "optim/flat_adamw_math.h"

namespace fptrain::optim::flat {

// Where the update's fp32 weight lives: the model's buffer itself, an fp32 master buffer, or
// the model's bf16 weight joined with the master's 16-bit remainder (flat_adamw_math.h).
enum class Masters { kNone, kFp32, kSplit };

// The model's copy of a master: bf16 by master_weight_bits (ties away from zero), fp16 by the cast.
template <typename P>
inline P model_copy(float master) {
  if constexpr (std::is_same_v<P, c10::BFloat16>) return P(master_weight_bits(master), P::from_bits());
  else return static_cast<P>(master);
}

}  // namespace fptrain::optim::flat
