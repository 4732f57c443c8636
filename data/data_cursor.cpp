#include "data/data_cursor.h"

#include "common/json_input.h"

#include <nlohmann/json.hpp>

#include <stdexcept>

namespace fptrain::data {

std::string DataCursor::to_json() const {
  nlohmann::json j = {{"version", 1},
                      {"epoch", epoch},
                      {"position", position},
                      {"window_batches_done", window_batches_done},
                      {"step", step},
                      {"fingerprint", fingerprint},
                      {"stats", stats.to_json()}};
  return j.dump();
}

DataCursor DataCursor::from_json(std::string_view text) {
  try {
    const auto j = common::parse_json(text, "data cursor");
    if (j.at("version").get<int>() != 1) throw std::runtime_error("unsupported version");
    DataCursor c;
    c.epoch = j.at("epoch").get<int64_t>();
    c.position = j.at("position").get<int64_t>();
    c.window_batches_done = j.at("window_batches_done").get<int64_t>();
    c.step = j.at("step").get<int64_t>();
    c.fingerprint = j.at("fingerprint").get<std::string>();
    c.stats = DataStats::from_json(j.at("stats"));
    return c;
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("data cursor: cannot read it: ") + e.what());
  }
}

}  // namespace fptrain::data
