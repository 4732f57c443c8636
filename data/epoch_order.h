// The order in which an epoch visits examples: every file's lines repeated by
// its weight, then (with shuffle) one seeded permutation of all of them. It is
// a pure function of (sizes, weights, seed, epoch), so a resumed run
// regenerates it instead of storing it.
#pragma once

#include <cstdint>
#include <vector>

namespace fptrain::data {

// A line of a file, packed in 64 bits: file index (24 bits), line index (40 bits).
struct ExampleRef {
  uint64_t packed;
  static ExampleRef make(uint32_t file, uint64_t line) { return {(uint64_t(file) << 40) | line}; }
  uint32_t file() const { return static_cast<uint32_t>(packed >> 40); }
  uint64_t line() const { return packed & ((uint64_t(1) << 40) - 1); }
};

// File f contributes round(weights[f] x lines[f]) examples: whole passes over
// its lines, plus a seeded subset (different each epoch) for the fraction.
std::vector<ExampleRef> make_epoch_order(const std::vector<uint64_t>& lines, const std::vector<double>& weights,
                                         bool shuffle, uint64_t seed, int64_t epoch);

}  // namespace fptrain::data
