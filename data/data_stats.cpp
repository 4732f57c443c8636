#include "data/data_stats.h"

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

}  // namespace fptrain::data
