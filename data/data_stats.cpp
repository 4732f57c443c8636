#include "data/data_stats.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace fptrain::data {

int64_t DataStats::skipped_total() const {
  int64_t n = 0;
  for (int64_t s : skipped) n += s;
  return n;
}

nlohmann::json DataStats::to_json() const {
  nlohmann::json skips = nlohmann::json::object(), first = nlohmann::json::object();
  for (int r = 0; r < kNumSkipReasons; ++r) {
    const char* name = common::enum_name(static_cast<SkipReason>(r));
    skips[name] = skipped[r];
    first[name] = first_skipped[r];
  }
  return {{"seen", seen},
          {"used", used},
          {"truncated", truncated},
          {"dropped", dropped},
          {"skipped", skips},
          {"tokens", tokens},
          {"supervised_tokens", supervised_tokens},
          {"truncated_tokens", truncated_tokens},
          {"first_skipped", first},
          {"first_dropped", first_dropped}};
}

DataStats DataStats::from_json(const nlohmann::json& j) {
  DataStats s;
  s.seen = j.at("seen").get<int64_t>();
  s.used = j.at("used").get<int64_t>();
  s.truncated = j.at("truncated").get<int64_t>();
  s.dropped = j.at("dropped").get<int64_t>();
  s.tokens = j.at("tokens").get<int64_t>();
  s.supervised_tokens = j.at("supervised_tokens").get<int64_t>();
  s.truncated_tokens = j.at("truncated_tokens").get<int64_t>();
  for (int r = 0; r < kNumSkipReasons; ++r) {
    const char* name = common::enum_name(static_cast<SkipReason>(r));
    s.skipped[r] = j.at("skipped").at(name).get<int64_t>();
    s.first_skipped[r] = j.at("first_skipped").at(name).get<std::vector<std::string>>();
  }
  s.first_dropped = j.at("first_dropped").get<std::vector<std::string>>();
  return s;
}

std::string describe_stats(const DataStats& s) {
  std::string out = std::to_string(s.seen) + " examples seen: " + std::to_string(s.trained()) + " used, " +
                    std::to_string(s.dropped) + " dropped (too long), " + std::to_string(s.skipped_total()) +
                    " skipped";
  for (int k = 0; k < kNumSkipReasons; ++k) {
    if (s.skipped[k] == 0) continue;
    out += std::string("; ") + common::enum_name(static_cast<SkipReason>(k)) + ": " + std::to_string(s.skipped[k]);
    if (!s.first_skipped[k].empty()) out += " (first at " + s.first_skipped[k].front() + ")";
  }
  return out;
}

void check_zero_supervised(const DataStats& s, double max_fraction, bool so_far) {
  const int64_t zero = s.skipped[static_cast<int>(SkipReason::kZeroSupervised)];
  if (s.seen == 0 || static_cast<double>(zero) <= max_fraction * static_cast<double>(s.seen)) return;
  std::string lines;
  for (const auto& w : s.first_skipped[static_cast<int>(SkipReason::kZeroSupervised)])
    lines += (lines.empty() ? "" : ", ") + w;
  if (zero > static_cast<int64_t>(DataStats::kFirstLinesKept)) lines += ", ...";
  // The smallest fraction (2 decimals, rounded up) that would let this data through.
  const double needed = std::ceil(100.0 * static_cast<double>(zero) / static_cast<double>(s.seen)) / 100.0;
  char fraction[32];
  std::snprintf(fraction, sizeof fraction, "%g", max_fraction);
  char enough[32];
  std::snprintf(enough, sizeof enough, "%.2f", needed);
  throw std::runtime_error("data: " + std::to_string(zero) + " of " + std::to_string(s.seen) + " examples" +
                           (so_far ? " read so far" : "") + " have no supervised token (" + lines +
                           "), more than data.max_zero_supervised_fraction = " + fraction +
                           "; check the loss mask (data.loss_mask), max_length and those lines, or set "
                           "data.max_zero_supervised_fraction: " + enough +
                           " to skip them and train on the rest");
}

}  // namespace fptrain::data
