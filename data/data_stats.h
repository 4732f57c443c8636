// Accounting of every example: each one the pipeline reads is counted as
// exactly one of used, truncated (used after truncation), dropped (too long,
// overlong: drop) or skipped (by reason), so nothing disappears silently.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/raw_example.h"

namespace fptrain::data {

struct DataStats {
  static constexpr size_t kFirstLinesKept = 5;

  int64_t seen = 0;
  int64_t used = 0;       // intact
  int64_t truncated = 0;  // used, cut to max_length
  int64_t dropped = 0;    // longer than max_length with overlong: drop
  std::array<int64_t, kNumSkipReasons> skipped{};
  int64_t tokens = 0;            // of used + truncated examples, after truncation
  int64_t supervised_tokens = 0;
  int64_t truncated_tokens = 0;  // tokens cut off by truncation
  // "file:line" of the first few examples per skip reason, and of dropped ones.
  std::array<std::vector<std::string>, kNumSkipReasons> first_skipped;
  std::vector<std::string> first_dropped;

  int64_t skipped_total() const;
  int64_t trained() const { return used + truncated; }

  nlohmann::json to_json() const;
  static DataStats from_json(const nlohmann::json& j);
};

// One line for messages: "12 examples seen: 0 used, ..., 12 skipped (malformed_json: 12, first: a.jsonl:1 ...)".
std::string describe_stats(const DataStats& stats);

// Throws when more than `max_fraction` of the examples seen have no supervised
// token, naming the first such lines and the key that lets a run go on
// (data.max_zero_supervised_fraction). `so_far`: a check during the epoch.
void check_zero_supervised(const DataStats& stats, double max_fraction, bool so_far);

}  // namespace fptrain::data
