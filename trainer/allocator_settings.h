// The CUDA caching allocator's settings for a training run.
//
// In one process the allocator grows expandable segments (PYTORCH_CUDA_ALLOC_CONF
// expandable_segments:True) unless the user configured it: with fixed segments, blocks of
// one step's varying sizes fragment the reserve, which on a Llama-2-7B held 3.9 GiB
// (every layer recomputed) and 6.4 GiB (long documents) more than transformers + Liger
// reserved, and 0.9 / 1.0 GiB more with expandable segments (H200, 2026-11-27,
// benchmarks/train/results/memory_ab_llama2-7b_h200_2026-11-27.md). Ranks of a group keep
// fixed segments: the copy-engine collectives share allocations across processes with
// cudaIpcGetMemHandle, which expandable segments do not support.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace fptrain::trainer {

// Whether to turn expandable segments on: a CUDA device, one process, and neither
// PYTORCH_CUDA_ALLOC_CONF nor PYTORCH_ALLOC_CONF set (null or empty: unset).
bool wants_expandable_segments(bool cuda, bool one_process, const char* cuda_alloc_conf, const char* alloc_conf);

// Applies the choice for this process before the run allocates; returns the line to log
// (empty when the allocator's settings stay as they are).
std::string choose_allocator_settings(const at::Device& device, bool one_process);

}  // namespace fptrain::trainer
